"""ClickTrain (Zhang et al., ICS 2021): pattern pruning during training, and the arms it is compared
with (ADMM pruning after training, PruneTrain channel pruning during training, 2:4 sparsity)."""
