import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.rerank import rerank_components_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
i, p = sm.input, sm.params
run_stage(
    sm,
    lambda: rerank_components_stage(
        i.dense_run,
        p.depth,
        i.queries,
        p.chunk_size,
        int(sm.wildcards.chunk),
        {
            "query_dense": i.query_dense,
            "query_sparse": i.query_sparse,
            "passage_dense": list(i.passage_dense),
            "passage_sparse": list(i.passage_sparse),
            "output": sm.output[0],
        },
        spec=p.spec,
        corpus=i.corpus,
        batch_size=p.batch_size,
        device=p.device,
        dtype=p.dtype,
    ),
)
