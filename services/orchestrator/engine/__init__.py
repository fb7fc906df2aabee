"""The canvas engine: DSL -> validate -> plan -> run as dataflow, with its events, variables and checkpoints.

Knows nothing of Redis or gRPC: `runs/` drives it, `api/` converts what it emits.
"""
