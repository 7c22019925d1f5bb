import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.fusion.components import union_components_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
i = sm.input
run_stage(
    sm,
    lambda: union_components_stage(
        i.dense_run,
        i.sparse_run,
        i.queries,
        sm.params.chunk_size,
        int(sm.wildcards.chunk),
        {
            "query_dense": i.query_dense,
            "query_sparse": i.query_sparse,
            "passage_dense": list(i.passage_dense),
            "passage_sparse": list(i.passage_sparse),
            "output": sm.output[0],
        },
    ),
)
