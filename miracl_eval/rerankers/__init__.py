"""Rerankers: score (query, passage) pairs with a cross-encoder or an LLM, as FlagEmbedding's rerankers do."""
