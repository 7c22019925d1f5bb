# What Snakemake's report shows (`snakemake --report report.html` after a run): readable result
# tables and bar charts, the published numbers side by side, paired significance and the top
# per-query wins and losses, the fusion sensitivity view, the run's settings and effective
# configuration, the judged passages missing from each corpus, and every stage's time and peak
# memory. All of it is built by the default target (rule all) and by `report_inputs`.

from miracl_eval.config.models import BUILT_CHECKPOINTS
from miracl_eval.evaluation.metrics import MEASURES, PRIMARY
from miracl_eval.report.html import measure_label
from miracl_eval.report.sensitivity import sensitivity_weights
from miracl_eval.report.plan import (
    comparison_pairs,
    run_settings,
    swept_rows,
)
from miracl_eval.evaluation.sensitivity import DEFAULT_WEIGHTS
from miracl_eval.evaluation.significance import N_BOOTSTRAP, N_PERMUTATIONS, SEED
from miracl_eval.report.stage_costs import plain_pattern

MEASURE_NAMES = {m.key: m.name for m in MEASURES}
REPORT_PAIRS = comparison_pairs(METHODS, HYBRIDS)
SENSITIVITY_METHODS = swept_rows(METHODS)
# the headline sparse weight marked in the sensitivity view: the first swept model's
SWEPT_SPARSE_WEIGHT = next(
    (
        MODELS[s.model]["weights"]["sparse"]
        for s in SYSTEMS
        if s.label in SENSITIVITY_METHODS
    ),
    0.3,
)
SIGNIFICANCE = {
    "n_permutations": N_PERMUTATIONS,
    "n_bootstrap": N_BOOTSTRAP,
    "seed": SEED,
}


# What a run keeps beside its numbers: the effective configuration, and the judged passages
# missing from each partition's corpus.
RUN_RECORDS = [PATHS["effective_config"], PATHS["mteb"]] + expand(
    path("judged_not_in_corpus", dataset="{{dataset}}"), part=PARTS
)


REPORT_TARGETS = (
    report_inputs(DATASET.name)
    + expand(RUN_RECORDS, dataset=DATASET.name)
    + [
        path("report_file", dataset=DATASET.name, page="stage_costs", ext=ext)
        for ext in ("tsv", "html")
    ]
)


rule report_results:
    input:
        reproduction=PATHS["reproduction"],
        context=PATHS["context"],
        table=report(
            PATHS["table"],
            caption="../report/results.rst",
            category="Results",
            subcategory=lambda wc: measure_label(MEASURE_NAMES[wc.measure]),
        ),
    output:
        html=report(
            path("report_file", page="{measure}", ext="html"),
            caption="../report/results.rst",
            category="Results",
            subcategory=lambda wc: measure_label(MEASURE_NAMES[wc.measure]),
        ),
        chart=report(
            path("report_file", page="{measure}", ext="svg"),
            caption="../report/results.rst",
            category="Results",
            subcategory=lambda wc: measure_label(MEASURE_NAMES[wc.measure]),
        ),
    log:
        log_path("report_results/{measure}"),
    benchmark:
        benchmark_path("report_results/{measure}")
    wildcard_constraints:
        measure=_alternatives(MEASURE_KEYS),
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measure=lambda wc: MEASURE_NAMES[wc.measure],
        label=lambda wc: measure_label(MEASURE_NAMES[wc.measure]),
        dataset=DATASET.name,
        split=config["split"],
        training=ROW_TRAINING,
    script:
        "../scripts/report_results.py"


rule report_published:
    input:
        **{key: path("table", measure=key) for key in MEASURE_KEYS},
        comparability=PATHS["comparability"],
    output:
        tsv=report(
            path("report_file", page="published", ext="tsv"),
            caption="../report/published.rst",
            category="Results vs published",
        ),
        html=report(
            path("report_file", page="published", ext="html"),
            caption="../report/published.rst",
            category="Results vs published",
        ),
    log:
        log_path("report_published"),
    benchmark:
        benchmark_path("report_published")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=MEASURE_NAMES,
        dataset=DATASET.name,
        split=config["split"],
        run_config={**config, **ENGINE_FACTS},
    script:
        "../scripts/report_published.py"


rule report_significance:
    input:
        PER_QUERY,
    output:
        tsv=report(
            path("report_file", page="significance", ext="tsv"),
            caption="../report/significance.rst",
            category="Significance",
            subcategory="Paired tests",
        ),
        html=report(
            path("report_file", page="significance", ext="html"),
            caption="../report/significance.rst",
            category="Significance",
            subcategory="Paired tests",
        ),
    log:
        log_path("report_significance"),
    benchmark:
        benchmark_path("report_significance")
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        **request("report"),
    params:
        **SIGNIFICANCE,
        methods=METHODS,
        partitions=PARTS,
        pairs=REPORT_PAIRS,
        measures=[m.name for m in MEASURES],
        mean_row=DATASET.mean_column,
        dataset=DATASET.name,
    script:
        "../scripts/report_significance.py"


rule report_top_differences:
    input:
        per_query=PER_QUERY,
        queries=expand(path("queries", dataset="{{dataset}}"), part=PARTS),
    output:
        tsv=report(
            path("report_file", page="top_differences", ext="tsv"),
            caption="../report/top_differences.rst",
            category="Significance",
            subcategory="Top wins and losses",
        ),
        html=report(
            path("report_file", page="top_differences", ext="html"),
            caption="../report/top_differences.rst",
            category="Significance",
            subcategory="Top wins and losses",
        ),
    log:
        log_path("report_top_differences"),
    benchmark:
        benchmark_path("report_top_differences")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        methods=METHODS,
        partitions=PARTS,
        pairs=REPORT_PAIRS,
        n=5,
        measure=PRIMARY.name,
        dataset=DATASET.name,
    script:
        "../scripts/report_top_differences.py"


rule report_sensitivity:
    input:
        components=expand(
            path("components", dataset="{{dataset}}"),
            part=PARTS,
            system=SENSITIVITY_METHODS,
        ),
        qrels=expand(path("qrels", dataset="{{dataset}}"), part=PARTS),
    output:
        tsv=report(
            path("report_file", page="sensitivity", ext="tsv"),
            caption="../report/sensitivity.rst",
            category="Sensitivity (fusion weight)",
        ),
        chart=report(
            path("report_file", page="sensitivity", ext="svg"),
            caption="../report/sensitivity.rst",
            category="Sensitivity (fusion weight)",
        ),
    log:
        log_path("report_sensitivity"),
    benchmark:
        benchmark_path("report_sensitivity")
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        **request("report"),
    params:
        partitions=PARTS,
        methods=SENSITIVITY_METHODS,
        weights=sensitivity_weights(SWEPT_SPARSE_WEIGHT, DEFAULT_WEIGHTS),
        fixed_weight=SWEPT_SPARSE_WEIGHT,
        mean_panel=DATASET.mean_column,
        dataset=DATASET.name,
    script:
        "../scripts/report_sensitivity.py"


rule report_settings:
    input:
        corpora=expand(path("corpus", dataset="{{dataset}}"), corpus=CORPORA),
        version=PATHS["data_version"],
        # the fetched hub checkpoints, whose records give the commits shown
        fetched=list(dict.fromkeys(FETCHED.values())),
    output:
        tsv=report(
            path("report_file", page="settings", ext="tsv"),
            caption="../report/settings.rst",
            category="Run settings and costs",
            subcategory="Settings",
        ),
        html=report(
            path("report_file", page="settings", ext="html"),
            caption="../report/settings.rst",
            category="Run settings and costs",
            subcategory="Settings",
        ),
    log:
        log_path("report_settings"),
    benchmark:
        benchmark_path("report_settings")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        settings=run_settings(
            config, DATASET.name, DATASET.mean_column, REPORT_PAIRS, SIGNIFICANCE
        ),
        corpora=CORPORA,
        shard_size=ENC["shard_size"] if MODELS else None,
        dataset=DATASET.name,
        fetched=FETCHED,
    script:
        "../scripts/report_settings.py"


rule effective_config:
    input:
        # the fetched hub checkpoints, whose commits it records
        list(dict.fromkeys(FETCHED.values())),
    output:
        report(
            PATHS["effective_config"],
            caption="../report/effective_config.rst",
            category="Run settings and costs",
            subcategory="Effective configuration",
        ),
    log:
        log_path("effective_config"),
    benchmark:
        benchmark_path("effective_config")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        config=config,
        fetched=FETCHED,
    script:
        "../scripts/effective_config.py"


rule report_stage_costs:
    input:
        expand(path("table", dataset="{{dataset}}"), measure=MEASURE_KEYS),
        report_inputs("{dataset}"),
        RUN_RECORDS,
    output:
        tsv=report(
            path("report_file", page="stage_costs", ext="tsv"),
            caption="../report/stage_costs.rst",
            category="Run settings and costs",
            subcategory="Stage costs",
        ),
        html=report(
            path("report_file", page="stage_costs", ext="html"),
            caption="../report/stage_costs.rst",
            category="Run settings and costs",
            subcategory="Stage costs",
        ),
    log:
        log_path("report_stage_costs"),
    benchmark:
        benchmark_path("report_stage_costs")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        stats_dir="stats",
        # every rule's benchmark pattern (evaluated once all rule files are read)
        patterns=lambda wc: {
            r.name: plain_pattern(str(r.benchmark))
            for r in workflow.rules
            if r.benchmark
        },
        # and their log patterns (a preloaded job's log has its forked process's peak memory)
        logs=lambda wc: {
            r.name: plain_pattern(str(r.log[0]))
            for r in workflow.rules
            if r.benchmark and r.log
        },
        allowed={
            "dataset": [DATASET.name],
            "part": PARTS,
            "corpus": CORPORA,
            "system": METHODS,
            "model": list(MODELS),
            "hybrid": list(HYBRIDS),
            "method": FUSED,
        },
        skip_rules=["report_stage_costs"]
        + (
            []
            if any(
                s["checkpoint"].startswith(BUILT_CHECKPOINTS) for s in MODELS.values()
            )
            else ["tiny_model"]
        )
        + (["download_corpus", "download_topics"] if SOURCE else []),
        dataset=DATASET.name,
        # what the API models' requests spent, every run and job (their ledgers)
        ledgers=lambda wc: {
            m: path("api_ledger", dataset=wc.dataset, model=m) for m in API_ENCODED
        },
    script:
        "../scripts/report_stage_costs.py"


rule report_inputs:
    input:
        REPORT_TARGETS,
    localrule: True
