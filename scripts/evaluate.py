import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.evaluation.metrics import evaluate_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: evaluate_stage(sm.input.runs, sm.input.qrels, list(sm.output)))
