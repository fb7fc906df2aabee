"""Runs from request to stored turn: admission and start, leases and take-over, the pump that journals a run's
events and fans them out to its callers, queries, and the session's turn when a run ends."""
