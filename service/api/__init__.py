"""Thin routers: parse, call a service function, shape the response."""
