import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.hybrid import hybrid_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

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
