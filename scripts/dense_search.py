import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import Call, plain  # noqa: E402
from miracl_eval.jobs.runner import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
i, p = sm.input, sm.params
settings = dict(
    k=p.hits,
    use_gpu=p.use_gpu,
    nprobe=p.nprobe,
    ef_search=p.ef_search,
    threads=sm.threads,
    tag=p.tag,
)
run_stage(
    sm,
    Call(
        "miracl_eval.faiss.search",
        "dense_search",
        plain((i.index, i.docids, i.queries, sm.output.run, sm.output.trec)),
        plain(settings),
    ),
    preload=sm.config["preload"],
)
