"""Evaluation: metrics with trec_eval semantics (rules ``evaluate``, ``tables``), paired significance,
fusion sensitivity, the comparability of the data and the published numbers.
"""
