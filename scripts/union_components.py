import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
i = sm.input
scored = {
    "query_dense": i.query_dense,
    "query_sparse": i.query_sparse,
    "passage_dense": list(sm.params.passage_dense),
    "passage_sparse": list(sm.params.passage_sparse),
    "output": sm.output[0],
}
run_stage(
    sm,
    Call(
        "miracl_eval.fusion.components",
        "union_components_stage",
        plain((i.dense_run, i.sparse_run, i.queries, sm.params.chunk_size, int(sm.wildcards.chunk), scored)),
        plain({"corpus": i.corpus}),
    ),
    preload=sm.config["preload"],
)
