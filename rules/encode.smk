# Every model's encodings: one job per block of corpus shards (GPU; `encoder.block_size` passages,
# the model loaded once) and one per partition's queries. A block job writes each shard's files on
# their own (atomically, stamped with the settings) and then the block's manifest; run again after
# a kill, it skips the shards already done. A family's rule writes what the family stores (BGE-M3:
# dense and sparse in one pass; a dense encoder: dense; SPLADE: sparse), so one rule is made per set
# of outputs among the used models. Multi-vector states are never stored (see rules/fusion.smk).
# Throughput settings (batch_size, token_budget; tokenizer workers from the job's threads) are read
# from the config by the script: they change no result, so they re-run no job.
# A model behind an HTTP API (family openai) gets rules of its own: CPU jobs (requests in flight, no
# model here, no GPU asked for), each waiting on the model's cost plan, which fails before any request
# when the plan costs more than the model's max_usd. At most `api_jobs` of a model's jobs run at once (a
# resource of the model's, API_RESOURCES), each paced to 1/api_jobs of its tokens_per_minute; each request
# goes into the model's ledger, and max_usd is checked against it before each one (params api_run).

from miracl_eval.encoders.api_plan import plan_settings
from miracl_eval.encoders.registry import FAMILIES

OUTPUT_SETS = sorted(
    {
        (FAMILIES[spec["family"]].outputs, FAMILIES[spec["family"]].remote)
        for spec in MODELS.values()
    }
)

for kinds, remote in OUTPUT_SETS:
    suffix = ("api_" if remote else "") + "_".join(kinds)
    with_kinds = _alternatives(
        [
            m
            for m, s in MODELS.items()
            if (FAMILIES[s["family"]].outputs, FAMILIES[s["family"]].remote)
            == (kinds, remote)
        ]
    )

    rule:
        name:
            f"encode_corpus_{suffix}"
        input:
            unpack(api_plan_input if remote else no_input),
            corpus=PATHS["corpus"],
            model=model_input,
        output:
            PATHS["encoded_block"],
        log:
            log_path(f"encode_corpus_{suffix}/{{model}}/{{corpus}}/{{block}}"),
        benchmark:
            benchmark_path(f"encode_corpus_{suffix}/{{model}}/{{corpus}}/{{block}}")
        wildcard_constraints:
            model=with_kinds,
        conda:
            "../envs/encode.yaml"
        threads: 1 if remote else ENCODE_THREADS
        resources:
            **request(
                "encode_api" if remote else "encode_corpus", kinds, "encode_corpus"
            ),
            **(api_slots() if remote else {}),
            gpu=0 if remote else GPU,
        params:
            **({"api_run": api_run} if remote else {}),
            spec=encoder_spec("passage"),
            shard_size=ENC["shard_size"],
            shard_files=lambda wc, kinds=kinds: {
                k: path("shard", kind=k, **dict(wc.items())) for k in kinds
            },
            device=ENC["device"],
            dtype=ENC["dtype"],
            dense_dtype=ENC["dense_dtype"],
        script:
            "../scripts/encode_corpus_block.py"

    rule:
        name:
            f"encode_queries_{suffix}"
        input:
            unpack(api_plan_input if remote else no_input),
            queries=PATHS["queries"],
            model=model_input,
        output:
            **{k: path("encoded_queries", kind=k) for k in kinds},
        log:
            log_path(f"encode_queries_{suffix}/{{model}}/{{part}}"),
        benchmark:
            benchmark_path(f"encode_queries_{suffix}/{{model}}/{{part}}")
        wildcard_constraints:
            model=with_kinds,
        conda:
            "../envs/encode.yaml"
        threads: 1 if remote else ENCODE_THREADS
        resources:
            **request(
                "encode_api_queries" if remote else "encode_queries",
                kinds,
                "encode_queries",
            ),
            **(api_slots() if remote else {}),
            gpu=0 if remote else GPU,
        params:
            **({"api_run": api_run} if remote else {}),
            spec=encoder_spec("query"),
            device=ENC["device"],
            dtype=ENC["dtype"],
        script:
            "../scripts/encode_queries.py"


if API_MODELS:

    rule api_cost_plan:
        input:
            corpora=lambda wc: expand(
                PATHS["corpus"], dataset=wc.dataset, corpus=CORPORA
            ),
            queries=lambda wc: expand(PATHS["queries"], dataset=wc.dataset, part=PARTS),
            tokenizer=lambda wc: _folder_input(MODELS[wc.model]["tokenizer"] or ""),
        output:
            PATHS["api_plan"],
        log:
            log_path("api_cost_plan/{model}"),
        benchmark:
            benchmark_path("api_cost_plan/{model}")
        wildcard_constraints:
            model=_alternatives(API_MODELS),
        threads: 1
        resources:
            **request("api_cost_plan"),
        params:
            spec=lambda wc: plan_settings(MODELS[wc.model]),
            corpora=CORPORA,
            parts=PARTS,
        script:
            "../scripts/api_cost_plan.py"
