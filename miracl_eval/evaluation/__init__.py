"""Evaluation: metrics with trec_eval semantics (rule ``evaluate``; :mod:`.tables` for rule ``tables``: the
tables with the rows' training and the reproduction verdicts beside them), paired significance, fusion
sensitivity, the comparability of the data and the published numbers.
"""
