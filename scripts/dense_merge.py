import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    Call(
        "miracl_eval.faiss.blocks",
        "merge_blocks",
        plain((list(sm.input), sm.wildcards.part, sm.output.run, sm.output.trec)),
        plain(dict(hits=p.hits, tag=p.tag, rescore=p.rescore)),
    ),
    preload=sm.config["preload"],
)
