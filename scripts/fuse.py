import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.fusion.weighted import fuse_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: fuse_stage(
        list(sm.input),
        dict(sm.params.weights),
        sm.output.run,
        sm.output.trec,
        sm.output.components,
        tag=sm.params.tag,
        depth=sm.params.depth,
    ),
)
