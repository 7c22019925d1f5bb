import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    Call("miracl_eval.inputs.judged", "judged_stage", plain((sm.input.qrels, sm.input.corpus, sm.output[0]))),
    preload=sm.config["preload"],
)
