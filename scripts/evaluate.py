import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.metrics import evaluate_stage  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: evaluate_stage(sm.input.run, sm.input.qrels, sm.output[0]))
