"""Encoders: one interface (:mod:`.base`), one module per model family, registered in :mod:`.registry`.

* :mod:`.registry` (no torch: the Snakefile imports it): the families, their settings, specs;
* :mod:`.kinds` (no torch): a text's role (query, passage) and the kinds of output (dense, sparse);
* :mod:`.base`: the shared machinery (device, checkpoint, tokenization, batching, CUDA copies);
* :mod:`.bge_m3`, :mod:`.dense`, :mod:`.splade`: the families;
* :mod:`.pipeline`: the host side (tokenizer threads, token-budget batches, outputs off the model's thread),
  below :mod:`.base`: what it asks of an encoder is its own protocol (``BatchEncoder``);
* :mod:`.encode`: the encoding stages (a block of corpus shards, the queries) to Parquet;
* :mod:`.blocks`: which shards of a block are done (fingerprints), block manifests;
* :mod:`.checkpoints` (no torch): checkpoint folders, hub models fetched once;
* :mod:`.outputs`: reading the stored vectors and lexical weights (no torch).
"""

#: what an encoding job imports before its first text; a preload server imports them once for all
#: of a run's encoding jobs (:mod:`miracl_eval.jobs.preload`, the ``PRELOAD`` of :mod:`.encode`)
PRELOAD_MODULES = (
    "torch",
    "transformers.modeling_utils",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.bert.modeling_bert",
    "transformers.models.xlm_roberta.modeling_xlm_roberta",
)
