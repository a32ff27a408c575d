"""Toolscout indexer: tool model, field documents, embeddings, lexical vectors and vector index adapters."""
