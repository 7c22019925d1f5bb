import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.preprocess import build_corpus_from  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_corpus_from(sm.input[0], sm.output[0], sm.params.title_join))
