import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
i, o = sm.input, sm.output
run_stage(
    sm,
    Call("miracl_eval.inputs.preprocess", "build_topics", plain((i.topics, i.qrels, o.queries, o.qrels))),
    preload=sm.config["preload"],
)
