import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
settings = dict(
    index_type=p.index_type,
    hnsw_m=p.hnsw_m,
    ivf_lists=p.ivf_lists,
    pq_m=p.pq_m,
    use_gpu=p.use_gpu,
    threads=sm.threads,
)
run_stage(
    sm,
    Call(
        "miracl_eval.faiss.index",
        "build_dense_index",
        plain((list(sm.params.shards), sm.output.index, sm.output.docids)),
        plain(settings),
    ),
    preload=sm.config["preload"],
)
