# Every model's encodings: one job per block of corpus shards (GPU; `encoder.block_size` passages,
# the model loaded once) and one per partition's queries. A block job writes each shard's files on
# their own (atomically, stamped with the settings) and then the block's manifest; run again after
# a kill, it skips the shards already done. A family's rule writes what the family stores (BGE-M3:
# dense and sparse in one pass; a dense encoder: dense; SPLADE: sparse), so one rule is made per set
# of outputs among the used models. Multi-vector states are never stored (see rules/fusion.smk).
# Throughput settings (batch_size, token_budget; tokenizer workers from the job's threads) are read
# from the config by the script: they change no result, so they re-run no job.

OUTPUT_SETS = sorted({FAMILIES[spec["family"]].outputs for spec in MODELS.values()})

for kinds in OUTPUT_SETS:
    suffix = "_".join(kinds)
    with_kinds = _alternatives(
        [m for m, s in MODELS.items() if FAMILIES[s["family"]].outputs == kinds]
    )

    rule:
        name:
            f"encode_corpus_{suffix}"
        input:
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
        threads: ENCODE_THREADS
        resources:
            **request("encode_corpus"),
            gpu=GPU,
        params:
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
        threads: ENCODE_THREADS
        resources:
            **request("encode_queries"),
            gpu=GPU,
        params:
            spec=encoder_spec("query"),
            device=ENC["device"],
            dtype=ENC["dtype"],
        script:
            "../scripts/encode_queries.py"
