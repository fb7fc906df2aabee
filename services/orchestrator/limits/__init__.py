"""Limits on what tenants may use of the orchestrator: per-tenant limits shared across replicas, and fair
sharing of one replica's run capacity when it is saturated (`fair_queue.py`)."""
