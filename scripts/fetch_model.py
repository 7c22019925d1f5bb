import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    Call(
        "miracl_eval.encoders.checkpoints",
        "fetch_checkpoint",
        plain((sm.params.repo_id, sm.output[0], sm.params.revision)),
    ),
)
