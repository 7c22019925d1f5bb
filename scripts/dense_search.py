import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.dense import dense_search  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

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
