"""Outbound traffic of the engine: the one HTTP client with its SSRF guard, and MCP servers."""
