# The offline demo/test models: tiny random checkpoints of each family's layout (BGE-M3, BERT and
# XLM-R encoders, a decoder, a masked LM) with a tokenizer trained on the whole bundled sample
# (fixed inputs, so adding a language never rebuilds them). A model's `checkpoint` names one as
# resources/models/tiny-{kind}.

TINY_KINDS = ["bge-m3", "bert", "xlm-r", "decoder", "mlm"]


rule tiny_model:
    input:
        expand(
            os.path.join(workflow.basedir, "sample/miracl/{lang}/corpus.jsonl"),
            lang=DATASET.partitions if DATASET.name == "miracl" else [],
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
