# TSM2X (Rivera et al., JPDC 2021): tall-and-skinny GEMM kernels against cuBLAS.


rule tsm2x:
    input:
        cfg=experiment_config("tsm2x/{exp}"),
        code=code_of("tsm2x/{exp}"),
        kernels=rules.build_kernels.output.manifest,
        ceilings=rules.ceilings.output.record,
    output:
        record=record("tsm2x/{exp}"),
    log:
        "results/logs/tsm2x/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        exp="tsm2_r|tsm2_l",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run(
            "tsm2x/{wildcards.exp}",
            kernels="results/build/kernels",
            ceilings="{input.ceilings}",
        )
