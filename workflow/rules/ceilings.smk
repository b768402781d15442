# Machine ceilings: the bandwidths and GEMM rates every kernel benchmark is measured against.


rule ceilings:
    input:
        cfg=experiment_config("ceilings/ceilings"),
        code=experiment_code("ceilings/ceilings"),
    output:
        record=record("ceilings/ceilings"),
    log:
        "results/logs/ceilings/ceilings.log",
    params:
        scale=SCALE,
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("ceilings/ceilings")
