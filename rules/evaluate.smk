# nDCG@10 and Recall@100 with trec_eval semantics, per query and as tables.


rule evaluate:
    input:
        run=PATHS["run"],
        qrels=PATHS["qrels"],
    output:
        PATHS["per_query"],
    log:
        "logs/{dataset}/evaluate/{part}/{system}.log",
    benchmark:
        "stats/{dataset}/evaluate/{part}/{system}.tsv"
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
        "logs/{dataset}/tables.log",
    benchmark:
        "stats/{dataset}/tables.tsv"
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
