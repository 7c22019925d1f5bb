import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.sensitivity import sensitivity_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: sensitivity_stage(
        list(sm.input.components),
        list(sm.input.qrels),
        sm.params.partitions,
        sm.params.methods,
        sm.params.weights,
        sm.params.fixed_weight,
        sm.output.tsv,
        sm.output.chart,
        mean_panel=sm.params.mean_panel,
        dataset=sm.params.dataset,
    ),
)
