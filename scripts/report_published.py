import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.report import published_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: published_stage(
        {name: sm.input[key] for key, name in sm.params.measures.items()},
        sm.params.dataset,
        sm.params.split,
        sm.params.run_config,
        sm.input.comparability,
        sm.output.tsv,
        sm.output.html,
    ),
)
