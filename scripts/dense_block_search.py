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
        "block_search",
        plain((list(p.shards), dict(zip(p.parts, sm.input.queries, strict=True)), sm.output[0])),
        plain(
            dict(
                hits=p.hits,
                device=p.device if sm.resources.get("gpu", 0) else "cpu",
                threads=sm.threads,
                view=dict(p.view),
                ranges=sm.input.ranges[0] if sm.input.ranges else None,
                rescore=p.rescore,
                model=sm.wildcards.model,
            )
        ),
    ),
    preload=sm.config["preload"],
)
