"""Renderers of the orchestrator's one RunEvent stream into the three wire dialects (DESIGN.md section 4)."""
