# Hybrids: two or more rows of the table fused with pyserini's fusion (interpolation, rrf,
# normalize, average), each under its own name.


rule hybrid:
    input:
        lambda wc: expand(
            path("run", dataset=wc.dataset, part=wc.part),
            system=HYBRIDS[wc.hybrid]["systems"],
        ),
    output:
        run=path("run", system="{hybrid}"),
        trec=path("trec", system="{hybrid}"),
    log:
        log_path("hybrid/{hybrid}/{part}"),
    benchmark:
        benchmark_path("hybrid/{hybrid}/{part}")
    wildcard_constraints:
        hybrid=_alternatives(HYBRIDS),
    conda:
        "../envs/hybrid.yaml"
    threads: 1
    resources:
        **request("hybrid"),
    params:
        settings=lambda wc: HYBRIDS[wc.hybrid],
        tag=lambda wc: wc.hybrid,
    script:
        "../scripts/hybrid.py"
