"""The test suite, a package: test modules import their helpers as `tests.support.<module>` (see tests/README.md)."""
