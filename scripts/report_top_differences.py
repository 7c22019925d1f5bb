import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.top_differences import top_differences_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: top_differences_stage(
        list(sm.input.per_query),
        sm.params.methods,
        sm.params.partitions,
        list(sm.input.queries),
        sm.params.pairs,
        sm.output.tsv,
        sm.output.html,
        n=sm.params.n,
        measure=sm.params.measure,
        dataset=sm.params.dataset,
    ),
)
