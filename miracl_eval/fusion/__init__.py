"""Combining scores: candidate lists, exact component scores (rules ``union_components``,
``rerank_components``), weighted fusion (``fuse``) and run-level hybrids (``hybrid``).
"""
