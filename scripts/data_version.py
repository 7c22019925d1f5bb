import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.datasets import get_dataset  # noqa: E402
from miracl_eval.download import version_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: version_stage(
        get_dataset(sm.wildcards.dataset), sm.params.setting, sm.params.from_hub, sm.params.revision, sm.output[0]
    ),
)
