import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    Call(
        "miracl_eval.fusion.weighted",
        "fuse_stage",
        plain((list(sm.input), dict(p.weights), sm.output.run, sm.output.trec, sm.output.components)),
        plain(dict(tag=p.tag, depth=p.depth)),
    ),
    preload=sm.config["preload"],
)
