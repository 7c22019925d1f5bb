"""The validated configuration: the schema (``schema.yaml``) and its defaults, named models and
their presets, the table's rows (systems), hybrids' settings, and where each setting came from.
"""
