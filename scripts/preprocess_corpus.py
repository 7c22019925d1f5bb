from miracl_eval.preprocess import build_corpus_from
from miracl_eval.stage import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_corpus_from(sm.input[0], sm.output[0], sm.params.title_join))
