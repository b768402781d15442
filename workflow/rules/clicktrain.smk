# ClickTrain (Zhang et al., ICS 2021): pattern pruning during training against pruning after
# training (ADMM), pruning during training (PruneTrain) and 2:4 sparsity; the comparisons behind the
# claims, the schedule-length sweep (its points run through the spine's sweep_point rule) and the
# pruned models' inference latency. The arms have a rule of their own: they also export pruned.pt,
# which the inference steps read; every other step is the spine's experiment rule.
use rule experiment as clicktrain_arm with:
    output:
        record=rules.experiment.output.record,
        pruned="results/{experiment}/pruned.pt",
    wildcard_constraints:
        experiment="clicktrain/(vgg16_|wide_)?(clicktrain|admm|prunetrain|sparse24)",


ruleorder: clicktrain_arm > experiment
