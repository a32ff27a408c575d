"""Guards of the service's edges: host and origin checks, body limits, open mode, failed-auth delays, scrubbing.

They import only settings and errors, so the MCP front end may use them too."""
