import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.runner import run_stage
from miracl_eval.offline.me5_small import convert

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: convert(None, sm.output[0]))
