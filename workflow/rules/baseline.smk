# Baseline training arm: plain SGD training of the CIFAR models, and our trainer's speed against
# a plain DataLoader loop.


rule baseline:
    input:
        cfg=experiment_config("baseline/{exp}"),
        code=code_of("baseline/{exp}"),
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=record("baseline/{exp}"),
    log:
        "results/logs/baseline/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        exp="resnet32|resnet32_e120|vgg16|trainer_bench",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("baseline/{wildcards.exp}", train="{input.train}", test="{input.test}")
