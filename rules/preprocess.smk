# Raw files to Parquet: corpus (title appended to each passage), queries, qrels.

# a param of the corpus preprocessing only where passages are stripped (MTEB's datasets), so that the
# recorded params of every other dataset's preprocessed corpus stay as they were (no rerun)
STRIP_PASSAGES = {"strip": True} if DATASET.strip_passages else {}


checkpoint preprocess_corpus:
    input:
        corpus_source,
    output:
        PATHS["corpus"],
    log:
        log_path("preprocess_corpus/{corpus}"),
    benchmark:
        benchmark_path("preprocess_corpus/{corpus}")
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("preprocess_corpus"),
    params:
        **STRIP_PASSAGES,
        title_join=lambda wc: config["title_join"],
        duplicates=config["corpus"]["duplicates"],
    script:
        "../scripts/preprocess_corpus.py"


checkpoint preprocess_topics:
    input:
        topics=topics_source,
        qrels=qrels_source,
    output:
        queries=PATHS["queries"],
        qrels=PATHS["qrels"],
    log:
        log_path("preprocess_topics/{part}"),
    benchmark:
        benchmark_path("preprocess_topics/{part}")
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("preprocess_topics"),
    script:
        "../scripts/preprocess_topics.py"


# Judged passages that are not in the corpus: listed per partition and counted in the log.
rule judged_not_in_corpus:
    input:
        qrels=PATHS["qrels"],
        corpus=part_corpus(PATHS["corpus"]),
    output:
        report(
            PATHS["judged_not_in_corpus"],
            caption="../report/judged_not_in_corpus.rst",
            category="Data checks",
            subcategory="Judged passages not in the corpus",
        ),
    log:
        log_path("judged_not_in_corpus/{part}"),
    benchmark:
        benchmark_path("judged_not_in_corpus/{part}")
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("judged_not_in_corpus"),
    script:
        "../scripts/judged_not_in_corpus.py"
