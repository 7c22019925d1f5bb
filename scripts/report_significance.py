import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.report.significance import significance_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: significance_stage(
        list(sm.input),
        sm.params.methods,
        sm.params.partitions,
        sm.params.pairs,
        sm.params.measures,
        sm.output.tsv,
        sm.output.html,
        mean_row=sm.params.mean_row,
        n_permutations=sm.params.n_permutations,
        n_bootstrap=sm.params.n_bootstrap,
        seed=sm.params.seed,
        dataset=sm.params.dataset,
    ),
)
