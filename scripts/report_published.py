import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.report import published_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: published_stage(
        {sm.params.measures[key]: path for key, path in sm.input.items()},
        sm.params.dataset,
        sm.params.split,
        sm.params.run_config,
        sm.output.tsv,
        sm.output.html,
    ),
)
