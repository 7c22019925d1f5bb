"""Lucene through Anserini (the engine under pyserini): the JVM, the analyzers, BM25 (rules
``bm25_index``, ``bm25_search``) and learned-sparse impact indexes (``sparse_index``, ``sparse_search``).
"""
