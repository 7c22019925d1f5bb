# What the run will cost before it starts: every job with its request, the GPU-hours, the disk and an
# API model's tokens and dollars, from two dry runs of this workflow with stand-ins of the preprocessed
# data (miracl_eval/report/forecast.py). No input: it downloads, preprocesses and encodes nothing, so
# `snakemake results/miracl_forecast.tsv` can run first; the report shows it.

from snakemake.exceptions import WorkflowError

# The run's --cores (a job's threads, and so its time request, are capped by them); without them (a cluster
# profile, where a job's threads are its own) as many as any rule asks for.
FORECAST_MAX_CORES = 4096
try:
    FORECAST_CORES = min(int(workflow.cores), FORECAST_MAX_CORES)
except (WorkflowError, TypeError):
    FORECAST_CORES = FORECAST_MAX_CORES


rule forecast:
    output:
        tsv=report(
            path("report_file", page="forecast", ext="tsv"),
            caption="../report/forecast.rst",
            category="Run settings and costs",
            subcategory="Forecast",
        ),
        html=report(
            path("report_file", page="forecast", ext="html"),
            caption="../report/forecast.rst",
            category="Run settings and costs",
            subcategory="Forecast",
        ),
    log:
        log_path("forecast"),
    benchmark:
        benchmark_path("forecast")
    localrule: True
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        snakefile=workflow.main_snakefile,
        config_as_given=CONFIG_AS_GIVEN,
        workdir=os.getcwd(),
        sample=os.path.join(workflow.basedir, "sample"),
        cores=FORECAST_CORES,
    script:
        "../scripts/forecast.py"
