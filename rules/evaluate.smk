# nDCG@10 and Recall@100 with trec_eval semantics, per query and as tables: one evaluation job per row
# (every partition; a second of work each), one table job.

from miracl_eval.evaluation.metrics import MEASURES
from miracl_eval.evaluation.mteb_results import mteb_rows


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
        per_query=PER_QUERY,
        # the checks that protect the tables' numbers run with them (onsuccess reports what they found)
        judged=expand(path("judged_not_in_corpus", dataset="{{dataset}}"), part=PARTS),
        comparability=PATHS["comparability"],
    output:
        **{key: path("table", measure=key) for key in MEASURE_KEYS},
        training=PATHS["training"],
        reproduction=PATHS["reproduction"],
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
        training=ROW_TRAINING,
        dataset=DATASET.name,
        split=config["split"],
        # the verdicts' tolerances; the rest of the run's config (what a published number is matched
        # on) is read from the config by the script: every setting it matches on changes the results
        reproduction=config["reproduction"],
        engines=ENGINE_FACTS,
    script:
        "../scripts/tables.py"


# Every published number of the same dataset, split and measures beside the run's rows, with the dataset
# revision it was computed at and whether this run reads that data: context, never a verdict (the verdicts
# are the tables' reproduction.tsv, only for rows of the same checkpoint and settings).
rule context:
    input:
        **{key: path("table", measure=key) for key in MEASURE_KEYS},
        comparability=PATHS["comparability"],
    output:
        report(
            PATHS["context"],
            caption="../report/context.rst",
            category="Results vs published",
        ),
    log:
        log_path("context"),
    benchmark:
        benchmark_path("context")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures={m.key: m.name for m in MEASURES},
        dataset=DATASET.name,
        split=config["split"],
        partitions=PARTS,
        run_config={**config, **ENGINE_FACTS},
    script:
        "../scripts/context.py"


# Whether the run's data is the data of the published numbers (for the tables' end-of-run notice and
# the report's published page).
rule comparability:
    input:
        corpora=expand(path("corpus", dataset="{{dataset}}"), corpus=CORPORA),
        queries=expand(path("queries", dataset="{{dataset}}"), part=PARTS),
        qrels=expand(path("qrels", dataset="{{dataset}}"), part=PARTS),
        version=PATHS["data_version"],
    output:
        report(
            PATHS["comparability"],
            caption="../report/comparability.rst",
            category="Results vs published",
        ),
    log:
        log_path("comparability"),
    benchmark:
        benchmark_path("comparability")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        split=config["split"],
        partitions=PARTS,
        corpus_of={p: DATASET.corpus_of(p) for p in PARTS},
        corpora=CORPORA,
    script:
        "../scripts/comparability.py"


# Every row as MTEB result files, over the partitions with the full data (none for a sample).
rule mteb_results:
    input:
        runs=expand(path("run", dataset="{{dataset}}"), part=PARTS, system=METHODS),
        qrels=expand(path("qrels", dataset="{{dataset}}"), part=PARTS),
        comparability=PATHS["comparability"],
    output:
        directory(PATHS["mteb"]),
    log:
        log_path("mteb_results"),
    benchmark:
        benchmark_path("mteb_results")
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        **request("evaluate"),
    params:
        dataset=DATASET.name,
        split=config["split"],
        runs=lambda wc: {
            m: {p: path("run", dataset=wc.dataset, part=p, system=m) for p in PARTS}
            for m in METHODS
        },
        qrels=lambda wc: {p: path("qrels", dataset=wc.dataset, part=p) for p in PARTS},
        rows=mteb_rows(
            config,
            {m: checkpoint_folder(m) for m in MODELS},
            {r: reranker_folder(r) for r in RERANKERS},
        ),
        # the downloads whose records give the data's revision (none for local files)
        sources=None if SOURCE else download_folders,
        title_join=lambda wc: config["title_join"],
    script:
        "../scripts/mteb_results.py"
