# Sparse retrieval for every model that stores lexical weights (BGE-M3, SPLADE): the weights
# quantized as the model's `quantization` says into a Lucene impact index, searched with the
# queries' quantized weights (exact integer dot products).

from miracl_eval.encoders.registry import models_with


rule sparse_index:
    input:
        corpus_blocks,
    output:
        directory(PATHS["sparse_index"]),
    log:
        log_path("sparse_index/{model}/{corpus}"),
    benchmark:
        benchmark_path("sparse_index/{model}/{corpus}")
    wildcard_constraints:
        model=_alternatives(models_with(MODELS, "sparse")),
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        **request("sparse_index"),
    params:
        shards=corpus_shards("sparse"),
        quantization=model_setting("quantization"),
        java_heap=config["java_heap"],
        # a new Anserini indexes again
        engine=ENGINE_FACTS["pyserini"]["release"],
    script:
        "../scripts/sparse_index.py"


rule sparse_search:
    input:
        index=part_corpus(PATHS["sparse_index"]),
        queries=path("encoded_queries", kind="sparse"),
    output:
        run=path("run", system="{model}/sparse"),
        trec=path("trec", system="{model}/sparse"),
    log:
        log_path("sparse_search/{model}/{part}"),
    benchmark:
        benchmark_path("sparse_search/{model}/{part}")
    wildcard_constraints:
        model=_alternatives(models_with(MODELS, "sparse")),
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        **request("sparse_search"),
    params:
        quantization=model_setting("quantization"),
        hits=config["hits"],
        tag=lambda wc: f"{wc.model}/sparse",
    script:
        "../scripts/sparse_search.py"
