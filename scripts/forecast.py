import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.forecast import forecast_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: forecast_stage(
        sm.params.snakefile,
        sm.params.config_as_given,
        sm.config,
        sm.params.workdir,
        sm.params.sample,
        int(sm.params.cores),
        sm.output.tsv,
        sm.output.html,
    ),
)
