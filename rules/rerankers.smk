# Rerankers: the top `depth` hits of any row (bm25, a model's method, a hybrid, a reranked row; a
# row of the table or not) scored by a cross-encoder or an LLM, one GPU job per query chunk that
# reads only the candidates' texts; then one reranked run per partition, tagged with its label.
# The scores are kept with the depth they were computed at: a lower depth re-runs only the
# reranked runs (reranker_scored_depth), a changed setting that alters scores only its chunks.


rule reranker_scores:
    input:
        run=path("run", system="{first}"),
        queries=PATHS["queries"],
        corpus=part_corpus(PATHS["corpus"]),
        model=reranker_input,
    output:
        path("reranker_scores"),
    log:
        log_path("reranker_scores/{reranker}/{part}/{first}/{chunk}"),
    benchmark:
        benchmark_path("reranker_scores/{reranker}/{part}/{first}/{chunk}")
    wildcard_constraints:
        reranker=_alternatives(RERANKERS),
        first=_alternatives(FIRST_STAGES),
        chunk=r"\d+",
    conda:
        "../envs/encode.yaml"
    threads: ENCODE_THREADS
    resources:
        **request("reranker_scores"),
        gpu=GPU,
    params:
        spec=reranker_spec,
        depth=reranker_scored_depth,
        chunk_size=config["query_chunk"],
        device=ENC["device"],
        dtype=ENC["dtype"],
    script:
        "../scripts/reranker_scores.py"


rule reranked_run:
    input:
        run=path("run", system="{first}"),
        scores=reranker_chunks,
    output:
        run=path("run", system="{first}>>{reranker}"),
        trec=path("trec", system="{first}>>{reranker}"),
    log:
        log_path("reranked_run/{reranker}/{part}/{first}"),
    benchmark:
        benchmark_path("reranked_run/{reranker}/{part}/{first}")
    wildcard_constraints:
        reranker=_alternatives(RERANKERS),
        first=_alternatives(FIRST_STAGES),
    conda:
        "../envs/eval.yaml"
    threads: 1
    resources:
        **request("reranked_run"),
    params:
        depth=lambda wc: RERANKERS[wc.reranker]["depth"],
        tag=lambda wc: f"{wc.first}>>{wc.reranker}",
    script:
        "../scripts/reranked_run.py"
