"""Upstream MCP servers: configuration, transports, sessions and pool, health, demo servers, /servers."""
