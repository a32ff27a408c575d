"""SQL catalog of record, logs and statistics (SQLAlchemy 2, SQLite or PostgreSQL)."""
