import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.inputs.preprocess import build_topics
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_topics(sm.input.topics, sm.input.qrels, sm.output.queries, sm.output.qrels))
