import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.evaluation.context import context_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: context_stage(
        {sm.params.measures[key]: sm.input[key] for key in sm.params.measures},
        sm.params.dataset,
        sm.params.split,
        sm.params.partitions,
        sm.params.run_config,
        sm.input.comparability,
        sm.output[0],
    ),
)
