import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    Call(
        "miracl_eval.rerankers.stage",
        "reranked_run_stage",
        plain((sm.input.run, list(sm.input.scores), sm.params.depth, sm.output.run, sm.output.trec)),
        plain(dict(tag=sm.params.tag)),
    ),
    preload=sm.config["preload"],
)
