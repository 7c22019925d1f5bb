# BM25 with pyserini's MIRACL settings: the language's Lucene analyzer, k1=0.9, b=0.4.

from miracl_eval.lucene.bm25 import DOCUMENT as BM25_DOCUMENT


rule bm25_index:
    input:
        PATHS["corpus"],
    output:
        directory(PATHS["bm25_index"]),
    log:
        log_path("bm25_index/{corpus}"),
    benchmark:
        benchmark_path("bm25_index/{corpus}")
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        **request("bm25_index"),
    params:
        language=lambda wc: DATASET.analyzer_language(wc.corpus),
        thai=config["bm25"]["thai"],
        # what the index depends on beside its settings: a new Anserini or document layout indexes again
        engine=ENGINE_FACTS["pyserini"]["release"],
        document=lambda wc: BM25_DOCUMENT,
        java_heap=config["java_heap"],
    script:
        "../scripts/bm25_index.py"


rule bm25_search:
    input:
        index=part_corpus(PATHS["bm25_index"]),
        queries=PATHS["queries"],
    output:
        run=path("run", system="bm25"),
        trec=path("trec", system="bm25"),
    log:
        log_path("bm25_search/{part}"),
    benchmark:
        benchmark_path("bm25_search/{part}")
    conda:
        "../envs/lucene.yaml"
    threads: config["threads"]
    resources:
        **request("bm25_search"),
    params:
        k1=config["bm25"]["k1"],
        b=config["bm25"]["b"],
        hits=config["hits"],
    script:
        "../scripts/bm25_search.py"
