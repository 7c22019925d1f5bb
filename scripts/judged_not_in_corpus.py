import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.judged import judged_stage
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: judged_stage(sm.input.qrels, sm.input.corpus, sm.output[0]))
