# ClickTrain arm: pattern pruning during training against pruning after training (ADMM), pruning
# during training (PruneTrain) and 2:4 sparsity; `clicktrain_compare` derives the claims' cross-arm ratios.


rule clicktrain:
    input:
        cfg=experiment_config("clicktrain/{exp}"),
        code=sorted(Path("src/repro/clicktrain").glob("*.py")),
        trainer=sorted(Path("src/repro/train").glob("*.py")),
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=record("clicktrain/{exp}"),
    log:
        "results/logs/clicktrain/{exp}.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        exp="(vgg16_)?(clicktrain|admm|prunetrain|sparse24)",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("clicktrain/{wildcards.exp}", train="{input.train}", test="{input.test}")


# {net}: "" for ResNet-32 (the claims' comparison), "vgg16_" for VGG-16; dense = that network's baseline
rule clicktrain_compare:
    input:
        cfg=experiment_config("clicktrain/{net}clicktrain_compare"),
        code=sorted(Path("src/repro/clicktrain").glob("*.py")),
        clicktrain=record("clicktrain/{net}clicktrain"),
        admm=record("clicktrain/{net}admm"),
        prunetrain=record("clicktrain/{net}prunetrain"),
        sparse24=record("clicktrain/{net}sparse24"),
        dense=lambda wc: record("baseline/" + (wc.net.rstrip("_") or "resnet32")),
    output:
        record=record("clicktrain/{net}clicktrain_compare"),
    log:
        "results/logs/clicktrain/{net}clicktrain_compare.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        net="(vgg16_)?",
    container:
        CPU_IMAGE
    shell:
        repro_run("clicktrain/{wildcards.net}clicktrain_compare", device="cpu", clicktrain="{input.clicktrain}",
                  admm="{input.admm}", prunetrain="{input.prunetrain}", sparse24="{input.sparse24}",
                  dense="{input.dense}")
