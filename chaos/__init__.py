"""The chaos suite and the soak: the stack under streaming load, with the faults production brings (`make chaos`,
chaos/runner.py) or for an hour with churn (`make soak`, chaos/soak.py); docs/durability.md says what each
found."""
