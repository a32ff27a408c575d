"""The catalog of record: registration, catalog files, change events, and the /tools and /events routes."""
