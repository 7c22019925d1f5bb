# nDCG@10 and Recall@100 with trec_eval semantics, per query and as tables.


rule evaluate:
    input:
        run=PATHS["run"],
        qrels=PATHS["qrels"],
    output:
        PATHS["per_query"],
    log:
        log_path("evaluate/{part}/{system}"),
    benchmark:
        benchmark_path("evaluate/{part}/{system}")
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        **request("evaluate"),
    script:
        "../scripts/evaluate.py"


rule tables:
    input:
        PER_QUERY,
    output:
        **{key: path("table", measure=key) for key in MEASURE_KEYS},
    log:
        log_path("tables"),
    benchmark:
        benchmark_path("tables")
    localrule: True
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        methods=METHODS,
        partitions=PARTS,
        mean_column=DATASET.mean_column,
    script:
        "../scripts/tables.py"
