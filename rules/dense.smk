# Dense retrieval for every model that stores dense vectors: a Faiss index (exact inner product by
# default) built from the model's vector shards, searched top-`hits` on GPU Faiss when there is one.


rule dense_index:
    input:
        corpus_blocks,
    output:
        index=PATHS["dense_index"],
        docids=PATHS["dense_docids"],
    log:
        log_path("dense_index/{model}/{corpus}"),
    benchmark:
        benchmark_path("dense_index/{model}/{corpus}")
    wildcard_constraints:
        model=_alternatives(models_with("dense")),
    conda:
        "../envs/encode.yaml"
    threads: config["threads"]
    resources:
        **request("dense_index"),
    params:
        shards=corpus_shards("dense"),
        index_type=DENSE_INDEX["type"],
        hnsw_m=DENSE_INDEX["hnsw_m"],
        ivf_lists=DENSE_INDEX["ivf_lists"],
        pq_m=DENSE_INDEX["pq_m"],
        use_gpu=DENSE_INDEX["gpu"],
    script:
        "../scripts/dense_index.py"


rule dense_search:
    input:
        index=part_corpus(PATHS["dense_index"]),
        docids=part_corpus(PATHS["dense_docids"]),
        queries=path("encoded_queries", kind="dense"),
    output:
        run=path("run", system="{model}/dense"),
        trec=path("trec", system="{model}/dense"),
    log:
        log_path("dense_search/{model}/{part}"),
    benchmark:
        benchmark_path("dense_search/{model}/{part}")
    wildcard_constraints:
        model=_alternatives(models_with("dense")),
    conda:
        "../envs/encode.yaml"
    threads: config["threads"]
    resources:
        **request("dense_search"),
        gpu=GPU if DENSE_INDEX["gpu"] else 0,
    params:
        hits=config["hits"],
        use_gpu=DENSE_INDEX["gpu"],
        nprobe=DENSE_INDEX["nprobe"],
        ef_search=DENSE_INDEX["hnsw_ef_search"],
        tag=lambda wc: f"{wc.model}/dense",
    script:
        "../scripts/dense_search.py"
