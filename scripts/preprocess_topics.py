from miracl_eval.preprocess import build_topics
from miracl_eval.stage import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_topics(sm.input.topics, sm.input.qrels, sm.output.queries, sm.output.qrels))
