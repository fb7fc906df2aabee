"""Renderers of the orchestrator's one RunEvent stream into the three wire dialects (docs/ARCHITECTURE.md, "The event stream")."""
