import sys

sys.path.insert(0, snakemake.scriptdir + "/..")  # noqa: F821 - the library beside scripts/

from miracl_eval.jobs.preload import plain
from miracl_eval.jobs.runner import run_stage

sm = snakemake  # noqa: F821 - injected by Snakemake
p = sm.params


def plan():
    from miracl_eval.encoders.api_plan import cost_plan

    corpora = dict(zip(p.corpora, sm.input.corpora, strict=True))
    queries = dict(zip(p.parts, sm.input.queries, strict=True))
    return cost_plan(corpora, queries, plain(p.spec), sm.wildcards.model, sm.output[0])


run_stage(sm, plan)
