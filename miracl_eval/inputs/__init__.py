"""The inputs: dataset records, hub downloads, raw loaders (corpus, topics, qrels), preprocessing
to Parquet (rules ``download_*``, ``preprocess_*``), and the judged passages missing from a corpus.
"""
