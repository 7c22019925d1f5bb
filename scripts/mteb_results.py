import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.evaluation.mteb_results import mteb_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(
    sm,
    lambda: mteb_stage(
        p.dataset, p.split, p.runs, p.qrels, sm.input.comparability, p.rows, sm.output[0], p.sources, p.title_join
    ),
)
