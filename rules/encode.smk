# Encoding with BGE-M3 (dense vectors and lexical weights): one job per corpus shard (GPU), and the
# queries of each partition. Multi-vector states are never stored (see rules/fusion.smk).


rule encode_corpus_shard:
    input:
        corpus="resources/{dataset}/corpus/{corpus}/corpus.parquet",
        model=model_input,
    output:
        dense="resources/{dataset}/encoded/{corpus}/dense/{shard}.parquet",
        sparse="resources/{dataset}/encoded/{corpus}/sparse/{shard}.parquet",
    log:
        "logs/{dataset}/encode_corpus/{corpus}/{shard}.log",
    benchmark:
        "stats/{dataset}/encode_corpus/{corpus}/{shard}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 2
    resources:
        gpu=GPU,
        mem_mb=16000,
    params:
        model=MODEL,
        shard_size=ENC["shard_size"],
        max_length=ENC["passage_max_length"],
        batch_size=ENC["batch_size"],
        device=ENC["device"],
        dtype=ENC["dtype"],
        dense_dtype=ENC["dense_dtype"],
    script:
        "../scripts/encode_corpus_shard.py"


rule encode_queries:
    input:
        queries="resources/{dataset}/topics/{part}/queries.parquet",
        model=model_input,
    output:
        dense="resources/{dataset}/encoded/queries/{part}/dense.parquet",
        sparse="resources/{dataset}/encoded/queries/{part}/sparse.parquet",
    log:
        "logs/{dataset}/encode_queries/{part}.log",
    benchmark:
        "stats/{dataset}/encode_queries/{part}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: 2
    resources:
        gpu=GPU,
        mem_mb=8000,
    params:
        model=MODEL,
        max_length=ENC["query_max_length"],
        batch_size=ENC["batch_size"],
        device=ENC["device"],
        dtype=ENC["dtype"],
    script:
        "../scripts/encode_queries.py"
