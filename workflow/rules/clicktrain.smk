# ClickTrain (Zhang et al., ICS 2021): pattern pruning during training against pruning after
# training (ADMM), pruning during training (PruneTrain) and 2:4 sparsity; the comparisons behind the
# claims, the schedule-length sweep (its points run through the spine's sweep_point rule) and the
# pruned models' inference latency. The arms have a rule of their own: they also export pruned.pt,
# which the inference steps read.
CLICKTRAIN_ARMS = "(vgg16_)?(clicktrain|admm|prunetrain|sparse24)"


rule clicktrain_arm:
    input:
        unpack(lambda wc: experiment_inputs(f"clicktrain/{wc.exp}")),
    output:
        record=record("clicktrain/{exp}"),
        pruned="results/clicktrain/{exp}/pruned.pt",
    log:
        log_of("clicktrain/{exp}"),
    params:
        scale=SCALE,
    wildcard_constraints:
        exp=CLICKTRAIN_ARMS,
    resources:
        **step_resources(lambda wc: f"clicktrain/{wc.exp}"),
    container:
        GPU_IMAGE
    shell:
        repro_run("clicktrain/{wildcards.exp}")


use rule experiment as clicktrain with:
    wildcard_constraints:
        paper="clicktrain",
        exp=experiments("clicktrain", exclude=[f"{net}{arm}" for net in ("", "vgg16_")
                                               for arm in ("clicktrain", "admm", "prunetrain", "sparse24")]),
