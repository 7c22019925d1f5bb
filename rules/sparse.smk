# Sparse retrieval: BGE-M3 lexical weights quantized ceil(w * 100) into a Lucene impact index,
# searched with the queries' quantized weights (exact integer dot products).


rule sparse_index:
    input:
        corpus_shards("sparse"),
    output:
        directory("resources/{dataset}/indexes/{corpus}/sparse"),
    log:
        "logs/{dataset}/sparse_index/{corpus}.log",
    benchmark:
        "stats/{dataset}/sparse_index/{corpus}.tsv"
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        mem_mb=8000,
    params:
        factor=config["sparse_quantization"],
        java_heap=config["java_heap"],
    script:
        "../scripts/sparse_index.py"


rule sparse_search:
    input:
        index=part_corpus("resources/{dataset}/indexes/{corpus}/sparse"),
        queries="resources/{dataset}/encoded/queries/{part}/sparse.parquet",
    output:
        run="runs/{dataset}/{part}/sparse.parquet",
        trec="runs/{dataset}/{part}/sparse.trec",
    log:
        "logs/{dataset}/sparse_search/{part}.log",
    benchmark:
        "stats/{dataset}/sparse_search/{part}.tsv"
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        mem_mb=8000,
    params:
        factor=config["sparse_quantization"],
        hits=config["hits"],
    script:
        "../scripts/sparse_search.py"
