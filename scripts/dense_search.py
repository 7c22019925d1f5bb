import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.faiss.search import dense_search
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: dense_search(
        sm.input.index,
        sm.input.docids,
        sm.input.queries,
        sm.output.run,
        sm.output.trec,
        k=p.hits,
        use_gpu=p.use_gpu,
        nprobe=p.nprobe,
        ef_search=p.ef_search,
        threads=sm.threads,
        tag=p.tag,
    ),
)
