import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.faiss.blocks import calibrate
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params
run_stage(sm, lambda: calibrate(list(p.shards), sm.output[0], dict(p.view), p.sample, sm.wildcards.model))
