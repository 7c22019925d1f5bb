# Dense retrieval: a Faiss index (exact inner product by default) built from the vector shards,
# searched top-`hits` on GPU Faiss when the machine has one.


rule dense_index:
    input:
        corpus_shards("dense"),
    output:
        index="resources/{dataset}/indexes/{corpus}/dense.faiss",
        docids="resources/{dataset}/indexes/{corpus}/dense.docids.parquet",
    log:
        "logs/{dataset}/dense_index/{corpus}.log",
    benchmark:
        "stats/{dataset}/dense_index/{corpus}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: config["threads"]
    resources:
        mem_mb=32000,
    params:
        index_type=DENSE_INDEX["type"],
        hnsw_m=DENSE_INDEX["hnsw_m"],
        ivf_lists=DENSE_INDEX["ivf_lists"],
        pq_m=DENSE_INDEX["pq_m"],
        use_gpu=DENSE_INDEX["gpu"],
    script:
        "../scripts/dense_index.py"


rule dense_search:
    input:
        index=part_corpus("resources/{dataset}/indexes/{corpus}/dense.faiss"),
        docids=part_corpus("resources/{dataset}/indexes/{corpus}/dense.docids.parquet"),
        queries="resources/{dataset}/encoded/queries/{part}/dense.parquet",
    output:
        run="runs/{dataset}/{part}/dense.parquet",
        trec="runs/{dataset}/{part}/dense.trec",
    log:
        "logs/{dataset}/dense_search/{part}.log",
    benchmark:
        "stats/{dataset}/dense_search/{part}.tsv"
    conda:
        "../envs/encode.yaml"
    threads: config["threads"]
    resources:
        gpu=GPU if DENSE_INDEX["gpu"] else 0,
        mem_mb=32000,
    params:
        hits=config["hits"],
        use_gpu=DENSE_INDEX["gpu"],
        nprobe=DENSE_INDEX["nprobe"],
        ef_search=DENSE_INDEX["hnsw_ef_search"],
    script:
        "../scripts/dense_search.py"
