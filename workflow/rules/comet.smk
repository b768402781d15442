# COMET (Jin et al., VLDB 2022): error-bounded lossy compression of saved activations. The GPU
# compressor's benchmark, the largest batch under a memory cap, four training arms on one eager
# schedule (uncompressed, fixed eb, adaptive eb, ActNN 2-bit), SZ3 on dumped activations (CPU),
# and `comet_compare` for the claims.

COMET_ARMS = ["comet_uncompressed", "comet_fixed_eb", "comet_adaptive_eb", "comet_actnn2bit"]


rule comet_bench:
    input:
        cfg=experiment_config("comet/comet_bench"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        kernels=rules.build_kernels.output.manifest,
    output:
        record=record("comet/comet_bench"),
    log:
        "results/logs/comet/comet_bench.log",
    params:
        scale=SCALE,
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("comet/comet_bench", kernels="results/build/kernels")


rule comet_max_batch:
    input:
        cfg=experiment_config("comet/comet_max_batch"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        kernels=rules.build_kernels.output.manifest,
    output:
        record=record("comet/comet_max_batch"),
    log:
        "results/logs/comet/comet_max_batch.log",
    params:
        scale=SCALE,
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("comet/comet_max_batch", kernels="results/build/kernels")


rule comet_step_bench:
    input:
        cfg=experiment_config("comet/comet_step_bench"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        kernels=rules.build_kernels.output.manifest,
    output:
        record=record("comet/comet_step_bench"),
    log:
        "results/logs/comet/comet_step_bench.log",
    params:
        scale=SCALE,
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("comet/comet_step_bench", kernels="results/build/kernels")


rule comet_arm:
    input:
        cfg=experiment_config("comet/{exp}"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        trainer=sorted(Path("src/repro/train").glob("*.py")),
        kernels=rules.build_kernels.output.manifest,
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=record("comet/{exp}"),
    log:
        "results/logs/comet/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        exp="|".join(COMET_ARMS),
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("comet/{wildcards.exp}", train="{input.train}", test="{input.test}",
                  kernels="results/build/kernels")


rule comet_sz3:
    input:
        cfg=experiment_config("comet/comet_sz3"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        test=rules.cifar10.output.test,
        uncompressed=expand(rules.comet_arm.output.record, exp="comet_uncompressed"),
    output:
        record=record("comet/comet_sz3"),
    log:
        "results/logs/comet/comet_sz3.log",
    params:
        scale=SCALE,
    container:
        CPU_IMAGE
    shell:
        repro_run("comet/comet_sz3", device="cpu", test="{input.test}", uncompressed="{input.uncompressed}")


rule comet_compare:
    input:
        cfg=experiment_config("comet/comet_compare"),
        code=sorted(Path("src/repro/comet").glob("*.py")),
        uncompressed=expand(rules.comet_arm.output.record, exp="comet_uncompressed"),
        fixed_eb=expand(rules.comet_arm.output.record, exp="comet_fixed_eb"),
        adaptive_eb=expand(rules.comet_arm.output.record, exp="comet_adaptive_eb"),
        actnn2bit=expand(rules.comet_arm.output.record, exp="comet_actnn2bit"),
        step_bench=rules.comet_step_bench.output.record,
    output:
        record=record("comet/comet_compare"),
    log:
        "results/logs/comet/comet_compare.log",
    params:
        scale=SCALE,
    container:
        CPU_IMAGE
    shell:
        repro_run("comet/comet_compare", device="cpu", uncompressed="{input.uncompressed}", fixed_eb="{input.fixed_eb}",
                  adaptive_eb="{input.adaptive_eb}", actnn2bit="{input.actnn2bit}", step_bench="{input.step_bench}")
