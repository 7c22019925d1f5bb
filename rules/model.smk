# The offline demo/test models: tiny random checkpoints of each family's layout (BGE-M3, BERT and
# XLM-R encoders, a decoder, a masked LM) with a tokenizer trained on the whole bundled sample
# (fixed inputs, so adding a language never rebuilds them). A model's `checkpoint` names one as
# resources/models/tiny-{kind}.

from miracl_eval.inputs.datasets import MIRACL_LANGUAGES

TINY_KINDS = ["bge-m3", "bert", "xlm-r", "decoder", "mlm", "cross-encoder", "llm"]


rule tiny_model:
    input:
        expand(
            os.path.join(workflow.basedir, "sample/miracl/{lang}/corpus.jsonl"),
            lang=MIRACL_LANGUAGES,
        ),
        os.path.join(workflow.basedir, "sample/messirve/corpus.jsonl"),
    output:
        directory(PATHS["tiny_model"]),
    log:
        log_path("tiny-{tiny}", scope="models"),
    benchmark:
        benchmark_path("tiny-{tiny}", scope="models")
    wildcard_constraints:
        tiny=_alternatives(TINY_KINDS),
    conda:
        "../envs/encode.yaml"
    threads: 1
    resources:
        **request("small"),
    params:
        seed=0,
    script:
        "../scripts/tiny_model.py"


# A model or reranker given by its Hugging Face hub id is fetched once, here, into the run's
# resources: at the commit that its own `revision` (a commit, tag or branch; left out: main) names
# then, recorded in the folder's miracl-eval-fetch.json. Each revision has its own folder
# ({org}--{name}, {org}--{name}@{revision}), which the model's jobs load without the hub: a new
# revision fetches and encodes again, the same one never. (`hub.revision` is the datasets'.)


rule fetch_model:
    output:
        directory(PATHS["hub_model"]),
    log:
        log_path("fetch-{hub_model}", scope="models"),
    benchmark:
        benchmark_path("fetch-{hub_model}", scope="models")
    wildcard_constraints:
        hub_model=_alternatives(HUB_MODELS),
    conda:
        "../envs/data.yaml"
    threads: 1
    resources:
        **request("download"),
    params:
        repo_id=lambda wc: HUB_MODELS[wc.hub_model][0],
        revision=lambda wc: HUB_MODELS[wc.hub_model][1],
    script:
        "../scripts/fetch_model.py"
