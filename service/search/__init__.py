"""Search: retrieval, pure ranking, evaluation, and POST /search."""
