import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.datasets import get_dataset
from miracl_eval.inputs.download import version_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: version_stage(
        get_dataset(sm.wildcards.dataset), sm.params.setting, sm.params.from_hub, sm.params.revision, sm.output[0]
    ),
)
