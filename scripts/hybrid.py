import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    Call(
        "miracl_eval.fusion.hybrids",
        "hybrid_stage",
        plain((list(sm.input), sm.output.run, sm.output.trec)),
        plain(dict(tag=sm.params.tag, settings=dict(sm.params.settings))),
    ),
    preload=sm.config["preload"],
)
