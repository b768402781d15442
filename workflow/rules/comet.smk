# COMET (Jin et al., VLDB 2022): error-bounded lossy compression of saved activations. The GPU
# compressor's benchmark, the largest batch under a memory cap, four training arms on one eager
# schedule (uncompressed, fixed eb, adaptive eb, ActNN 2-bit) on ResNet-32 and (prefix vgg16_) on
# VGG-16, SZ3 on dumped activations (CPU), `comet_compare` / `vgg16_comet_compare` for the claims,
# and `comet_eb_sweep`: the ResNet-32 arms at larger error bounds.
from repro.comet import sweep as comet_sweep

COMET_ARMS = ["comet_uncompressed", "comet_fixed_eb", "comet_adaptive_eb", "comet_actnn2bit"]
COMET_ARM_RUNS = COMET_ARMS + [f"vgg16_{arm}" for arm in COMET_ARMS]
EB_SWEEP = comet_sweep.read_config(experiment_config("comet/comet_eb_sweep"), SCALE)
EB_POINTS = comet_sweep.points(EB_SWEEP)  # folder name -> (arm, {parameter: value})


rule comet_bench:
    input:
        cfg=experiment_config("comet/comet_bench"),
        code=experiment_code("comet/comet_bench"),
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
        code=experiment_code("comet/comet_max_batch"),
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
        code=experiment_code("comet/comet_step_bench"),
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
        code=code_of("comet/{exp}"),
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
        exp="|".join(COMET_ARM_RUNS),
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
        code=experiment_code("comet/comet_sz3"),
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


# {net}: "" for ResNet-32 (the claims' comparison; its speed ratio from the side-by-side step
# bench), "vgg16_" for VGG-16 (speed ratio from the arms' own runs)
rule comet_compare:
    input:
        cfg=experiment_config("comet/{net}comet_compare"),
        code=code_of("comet/{net}comet_compare"),
        uncompressed=record("comet/{net}comet_uncompressed"),
        fixed_eb=record("comet/{net}comet_fixed_eb"),
        adaptive_eb=record("comet/{net}comet_adaptive_eb"),
        actnn2bit=record("comet/{net}comet_actnn2bit"),
        step_bench=lambda wc: [] if wc.net else rules.comet_step_bench.output.record,
    output:
        record=record("comet/{net}comet_compare"),
    log:
        "results/logs/comet/{net}comet_compare.log",
    params:
        scale=SCALE,
        step_bench=lambda wc, input: f" inputs.step_bench={input.step_bench}" if input.step_bench else "",
    wildcard_constraints:
        net="(vgg16_)?",
    container:
        CPU_IMAGE
    shell:
        repro_run("comet/{wildcards.net}comet_compare", device="cpu", overrides="{params.step_bench}",
                  uncompressed="{input.uncompressed}", fixed_eb="{input.fixed_eb}",
                  adaptive_eb="{input.adaptive_eb}", actnn2bit="{input.actnn2bit}")


# One point of the error-bound sweep: the arm's own experiment at one value of its swept parameter
# (and those scaled with it), in its own folder; a point equal to the arm's configured run is not rerun.
rule comet_eb_sweep_point:
    input:
        cfg=lambda wc: experiment_config(EB_SWEEP.arms[EB_POINTS[wc.point][0]].experiment),
        code=lambda wc: experiment_code(EB_SWEEP.arms[EB_POINTS[wc.point][0]].experiment),
        kernels=rules.build_kernels.output.manifest,
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=comet_sweep.point_record("{point}"),
    log:
        "results/logs/comet/comet_eb_sweep/{point}.log",
    params:
        scale=SCALE,
        experiment=lambda wc: EB_SWEEP.arms[EB_POINTS[wc.point][0]].experiment,
        overrides=lambda wc: comet_sweep.hydra_overrides(EB_POINTS[wc.point][1], SCALE),
    wildcard_constraints:
        point="|".join(EB_POINTS),
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("{params.experiment}", out=comet_sweep.point_dir("{wildcards.point}"),
                  overrides="{params.overrides}", train="{input.train}", test="{input.test}",
                  kernels="results/build/kernels")


rule comet_eb_sweep:
    input:
        cfg=experiment_config("comet/comet_eb_sweep"),
        code=experiment_code("comet/comet_eb_sweep"),
        points=comet_sweep.sweep_records(EB_SWEEP, "config", SCALE),
        uncompressed=record("comet/comet_uncompressed"),
        actnn2bit=record("comet/comet_actnn2bit"),
        **{arm: record(swept.experiment) for arm, swept in EB_SWEEP.arms.items()},
    output:
        record=record("comet/comet_eb_sweep"),
    log:
        "results/logs/comet/comet_eb_sweep.log",
    params:
        scale=SCALE,
    container:
        CPU_IMAGE
    shell:
        repro_run("comet/comet_eb_sweep", device="cpu", sweep=comet_sweep.SWEEP_DIR,
                  uncompressed="{input.uncompressed}", actnn2bit="{input.actnn2bit}",
                  **{arm: f"{{input.{arm}}}" for arm in EB_SWEEP.arms})
