# ClickTrain arm: pattern pruning during training against pruning after training (ADMM), pruning
# during training (PruneTrain) and 2:4 sparsity; `clicktrain_compare` derives the claims' cross-arm
# ratios, `clicktrain_budget` sweeps the schedule length, `clicktrain_inference` times the pruned models.
from repro.clicktrain import sweep

CLICKTRAIN_ARMS = ["clicktrain", "admm", "prunetrain", "sparse24"]
BUDGET = sweep.read_config(experiment_config("clicktrain/clicktrain_budget"), SCALE)


rule clicktrain:
    input:
        cfg=experiment_config("clicktrain/{exp}"),
        code=code_of("clicktrain/{exp}"),
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=record("clicktrain/{exp}"),
        pruned="results/clicktrain/{exp}/pruned.pt",
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
        code=code_of("clicktrain/{net}clicktrain_compare"),
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


# One point of the schedule-length sweep: the arm's own experiment at budget {epochs} (its phase
# lengths scaled alike), in its own folder; a point equal to the arm's configured run is not rerun.
rule clicktrain_budget_point:
    input:
        cfg=lambda wc: experiment_config(BUDGET.arms[wc.arm]),
        code=lambda wc: experiment_code(BUDGET.arms[wc.arm]),
        train=rules.cifar10.output.train,
        test=rules.cifar10.output.test,
    output:
        record=sweep.point_record("{arm}", "{epochs}"),
    log:
        "results/logs/clicktrain/clicktrain_budget/{arm}_e{epochs}.log",
    params:
        scale=SCALE,
        experiment=lambda wc: BUDGET.arms[wc.arm],
        overrides=lambda wc: sweep.hydra_overrides(sweep.point_params(BUDGET, wc.arm, int(wc.epochs)), SCALE),
        out=lambda wc: sweep.point_dir(wc.arm, wc.epochs),
    wildcard_constraints:
        arm="|".join(BUDGET.arms),
        epochs=r"\d+",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("{params.experiment}", out="{params.out}",
                  overrides="{params.overrides}", train="{input.train}", test="{input.test}")


# A repeat of one point with another seed (the sweep's `repeat_budgets` x `repeat_seeds`): the spread of
# one configuration's top-1.
use rule clicktrain_budget_point as clicktrain_budget_repeat with:
    output:
        record=sweep.point_record("{arm}", "{epochs}", "{seed}"),
    log:
        "results/logs/clicktrain/clicktrain_budget/{arm}_e{epochs}_s{seed}.log",
    params:
        scale=SCALE,
        experiment=lambda wc: BUDGET.arms[wc.arm],
        overrides=lambda wc: sweep.hydra_overrides(sweep.point_params(BUDGET, wc.arm, int(wc.epochs)), SCALE)
                             + f" seed={int(wc.seed)}",
        out=lambda wc: sweep.point_dir(wc.arm, wc.epochs, wc.seed),
    wildcard_constraints:
        arm="|".join(BUDGET.arms),
        epochs=r"\d+",
        seed=r"\d+",


rule clicktrain_budget:
    input:
        cfg=experiment_config("clicktrain/clicktrain_budget"),
        code=experiment_code("clicktrain/clicktrain_budget"),
        points=sweep.sweep_records(BUDGET, "config", SCALE),
        **{arm: record(experiment) for arm, experiment in BUDGET.arms.items()},
    output:
        record=record("clicktrain/clicktrain_budget"),
    log:
        "results/logs/clicktrain/clicktrain_budget.log",
    params:
        scale=SCALE,
    container:
        CPU_IMAGE
    shell:
        repro_run("clicktrain/clicktrain_budget", device="cpu", sweep=sweep.SWEEP_DIR,
                  **{arm: f"{{input.{arm}}}" for arm in BUDGET.arms})


# {net} as in clicktrain_compare; the arms' exported models (pruned.pt beside their records)
rule clicktrain_inference:
    input:
        cfg=experiment_config("clicktrain/{net}inference"),
        code=code_of("clicktrain/{net}inference"),
        models=expand(rules.clicktrain.output.pruned, exp=[f"{{net}}{arm}" for arm in CLICKTRAIN_ARMS]),
        clicktrain=record("clicktrain/{net}clicktrain"),
        admm=record("clicktrain/{net}admm"),
        prunetrain=record("clicktrain/{net}prunetrain"),
        sparse24=record("clicktrain/{net}sparse24"),
    output:
        record=record("clicktrain/{net}inference"),
    log:
        "results/logs/clicktrain/{net}inference.log",
    params:
        scale=SCALE,
    wildcard_constraints:
        net="(vgg16_)?",
    resources:
        gpu=1,
    container:
        GPU_IMAGE
    shell:
        repro_run("clicktrain/{wildcards.net}inference", clicktrain="{input.clicktrain}", admm="{input.admm}",
                  prunetrain="{input.prunetrain}", sparse24="{input.sparse24}")
