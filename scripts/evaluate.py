from miracl_eval.metrics import evaluate_stage
from miracl_eval.stage import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: evaluate_stage(sm.input.run, sm.input.qrels, sm.output[0]))
