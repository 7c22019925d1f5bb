import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.preprocess import build_topics  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(sm, lambda: build_topics(sm.input.topics, sm.input.qrels, sm.output.queries, sm.output.qrels))
