import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.faiss.index import build_dense_index
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: build_dense_index(
        list(sm.input),
        sm.output.index,
        sm.output.docids,
        index_type=p.index_type,
        hnsw_m=p.hnsw_m,
        ivf_lists=p.ivf_lists,
        pq_m=p.pq_m,
        use_gpu=p.use_gpu,
        threads=sm.threads,
    ),
)
