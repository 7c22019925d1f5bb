import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.fusion.hybrids import hybrid_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: hybrid_stage(
        list(sm.input),
        sm.output.run,
        sm.output.trec,
        tag=sm.params.tag,
        settings=dict(sm.params.settings),
    ),
)
