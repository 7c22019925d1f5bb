import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.comparability import comparability_stage  # noqa: E402
from miracl_eval.download import read_version  # noqa: E402
from miracl_eval.stage import run_stage  # noqa: E402

sm = snakemake  # noqa: F821 - injected by Snakemake
run_stage(
    sm,
    lambda: comparability_stage(
        sm.wildcards.dataset,
        sm.params.split,
        sm.params.partitions,
        sm.params.corpus_of,
        dict(zip(sm.params.corpora, sm.input.corpora, strict=True)),
        list(sm.input.queries),
        list(sm.input.qrels),
        read_version(sm.input.version),
        sm.output[0],
    ),
)
