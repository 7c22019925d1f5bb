"""Encoders: one interface (:mod:`.base`), one module per model family, registered in :mod:`.registry`.

* :mod:`.registry` (no torch: the Snakefile imports it): the families, their settings, specs;
* :mod:`.base`: the shared machinery (device, checkpoint, tokenization, batching, CUDA copies);
* :mod:`.bge_m3`, :mod:`.dense`, :mod:`.splade`: the families;
* :mod:`.stages`: the encoding stages (a corpus shard, the queries) to Parquet.
"""
