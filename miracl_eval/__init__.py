"""miracl-eval: reproducible multilingual retrieval evaluation (MIRACL, MessIRve).

The library behind the Snakemake workflow: one module per concept (schemas, loading,
preprocess, analysis, indexing, retrieval, encoders, dense, sparse, fusion, metrics, ...).
"""

__version__ = "0.1.0"
