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
        exp="clicktrain|admm|prunetrain|sparse24",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("clicktrain/{wildcards.exp}", train="{input.train}", test="{input.test}")


rule clicktrain_compare:
    input:
        cfg=experiment_config("clicktrain/clicktrain_compare"),
        code=sorted(Path("src/repro/clicktrain").glob("*.py")),
        clicktrain=expand(rules.clicktrain.output.record, exp="clicktrain"),
        admm=expand(rules.clicktrain.output.record, exp="admm"),
        prunetrain=expand(rules.clicktrain.output.record, exp="prunetrain"),
        sparse24=expand(rules.clicktrain.output.record, exp="sparse24"),
        dense=expand(rules.baseline.output.record, exp="resnet32"),
    output:
        record=record("clicktrain/clicktrain_compare"),
    log:
        "results/logs/clicktrain/clicktrain_compare.log",
    params:
        scale=SCALE,
    container:
        CPU_IMAGE
    shell:
        repro_run("clicktrain/clicktrain_compare", device="cpu", clicktrain="{input.clicktrain}", admm="{input.admm}",
                  prunetrain="{input.prunetrain}", sparse24="{input.sparse24}", dense="{input.dense}")
