# Multi-vector rerank and weighted fusion. Component scores are computed exactly for every
# candidate and kept, so that new fusion weights re-run only `fuse` and evaluation.


rule union_components:
    input:
        dense_run="runs/{dataset}/{part}/dense.parquet",
        sparse_run="runs/{dataset}/{part}/sparse.parquet",
        queries="resources/{dataset}/topics/{part}/queries.parquet",
        query_dense="resources/{dataset}/encoded/queries/{part}/dense.parquet",
        query_sparse="resources/{dataset}/encoded/queries/{part}/sparse.parquet",
        passage_dense=corpus_shards("dense"),
        passage_sparse=corpus_shards("sparse"),
    output:
        "resources/{dataset}/scores/{part}/union/{chunk}.parquet",
    log:
        "logs/{dataset}/union_components/{part}/{chunk}.log",
    benchmark:
        "stats/{dataset}/union_components/{part}/{chunk}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 1
    resources:
        mem_mb=16000,
    params:
        chunk_size=config["query_chunk"],
    script:
        "../scripts/union_components.py"


rule rerank_components:
    input:
        dense_run="runs/{dataset}/{part}/dense.parquet",
        queries="resources/{dataset}/topics/{part}/queries.parquet",
        corpus=corpus_parquet,
        query_dense="resources/{dataset}/encoded/queries/{part}/dense.parquet",
        query_sparse="resources/{dataset}/encoded/queries/{part}/sparse.parquet",
        passage_dense=corpus_shards("dense"),
        passage_sparse=corpus_shards("sparse"),
        model=model_input,
    output:
        "resources/{dataset}/scores/{part}/rerank/{chunk}.parquet",
    log:
        "logs/{dataset}/rerank_components/{part}/{chunk}.log",
    benchmark:
        "stats/{dataset}/rerank_components/{part}/{chunk}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 2
    resources:
        gpu=GPU,
        mem_mb=16000,
    params:
        depth=config["rerank_depth"],
        chunk_size=config["query_chunk"],
        model=MODEL,
        query_max_length=ENC["query_max_length"],
        passage_max_length=ENC["passage_max_length"],
        batch_size=ENC["batch_size"],
        device=ENC["device"],
        dtype=ENC["dtype"],
    script:
        "../scripts/rerank_components.py"


rule fuse:
    input:
        fusion_components,
    output:
        run="runs/{dataset}/{part}/{method}.parquet",
        trec="runs/{dataset}/{part}/{method}.trec",
        components="runs/{dataset}/{part}/{method}.components.parquet",
    log:
        "logs/{dataset}/fuse/{part}/{method}.log",
    benchmark:
        "stats/{dataset}/fuse/{part}/{method}.tsv"
    wildcard_constraints:
        method=_alternatives(FUSED),
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        weights=lambda wc: {c: config["fusion"][c] for c in FUSED_COMPONENTS[wc.method]},
        depth=lambda wc: (
            config["hits"] if wc.method == "dense+sparse" else config["rerank_depth"]
        ),
    script:
        "../scripts/fuse.py"
