# Raw files to Parquet: corpus (title appended to each passage), queries, qrels.


checkpoint preprocess_corpus:
    input:
        corpus_source,
    output:
        PATHS["corpus"],
    log:
        "logs/{dataset}/preprocess_corpus/{corpus}.log",
    benchmark:
        "stats/{dataset}/preprocess_corpus/{corpus}.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("preprocess_corpus"),
    params:
        title_join=lambda wc: config["title_join"],
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
        "logs/{dataset}/preprocess_topics/{part}.log",
    benchmark:
        "stats/{dataset}/preprocess_topics/{part}.tsv"
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
        "logs/{dataset}/judged_not_in_corpus/{part}.log",
    benchmark:
        "stats/{dataset}/judged_not_in_corpus/{part}.tsv"
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    script:
        "../scripts/judged_not_in_corpus.py"
