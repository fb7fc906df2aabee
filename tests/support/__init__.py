"""Helpers shared by tests: components written for the tests (tools...), importable as `support.<module>`."""
