# nDCG@10 and Recall@100 with trec_eval semantics, per query and as tables: one evaluation job per row
# (every partition; a second of work each), one table job.


rule evaluate:
    input:
        runs=expand(path("run", dataset="{{dataset}}", system="{{system}}"), part=PARTS),
        qrels=expand(path("qrels", dataset="{{dataset}}"), part=PARTS),
    output:
        expand(
            path("per_query", dataset="{{dataset}}", system="{{system}}"), part=PARTS
        ),
    log:
        log_path("evaluate/{system}"),
    benchmark:
        benchmark_path("evaluate/{system}")
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
