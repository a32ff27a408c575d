"""Toolscout runtime: HTTP API, MCP front end, CLI, execution, policy, learning and analytics."""
