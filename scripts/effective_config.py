import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.config.provenance import write_effective_config
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: write_effective_config(sm.params.config, sm.output[0], sm.params.fetched))
