"""The report: one module per page, shared HTML and charts, and the report's plan (no files read)."""
