# Baseline training arm: plain SGD training of the CIFAR models, and our trainer's speed against a
# plain DataLoader loop.
use rule experiment as baseline with:
    wildcard_constraints:
        paper="baseline",
        exp=experiments("baseline"),
