"""Policy: callers and API keys, permissions, approvals, rate limits, /keys and /approvals."""
