from miracl_eval.retrieval import bm25_search
from miracl_eval.stage import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: bm25_search(
        sm.input.index,
        sm.input.queries,
        sm.output.run,
        sm.output.trec,
        k1=sm.params.k1,
        b=sm.params.b,
        k=sm.params.hits,
        threads=sm.threads,
    ),
)
