import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.results import results_views_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: results_views_stage(
        sm.input.table,
        sm.params.measure,
        sm.params.dataset,
        sm.params.split,
        sm.output.html,
        sm.output.chart,
        training=sm.params.training,
        reproduction=sm.input.reproduction,
        context=sm.input.context,
    ),
)
