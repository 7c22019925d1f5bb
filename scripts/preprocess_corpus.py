import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.preprocess import build_corpus_from
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_corpus_from(sm.input[0], sm.output[0], sm.params.title_join))
