import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
i, p = sm.input, sm.params
scored = {"query_dense": i.query_dense, "query_sparse": i.query_sparse, "output": sm.output[0]}
run_stage(
    sm,
    Call(
        "miracl_eval.fusion.components",
        "rerank_components_stage",
        plain((i.dense_run, p.depth, i.queries, p.chunk_size, int(sm.wildcards.chunk), scored)),
        plain(
            dict(
                spec=p.spec,
                corpus=i.corpus,
                batch_size=sm.config["encoder"]["batch_size"],
                token_budget=sm.config["encoder"]["token_budget"],
                device=p.device,
                dtype=p.dtype,
            )
        ),
    ),
    preload=sm.config["preload"],
)
