"""LinUCB for delay minimisation, and the arm features ANS and CANS learn over.

One linear model (ridge statistics ``A = lambda I + sum x x^T``, ``b = sum y x``) predicts an
offloading delay ``y`` (transfer + round trip + the edge's part) from the features ``x`` of a split
point. A learner picks the split of least optimistic delay: the device's own part (known: the device
times itself) plus ``x . theta - alpha sqrt(x^T A^-1 x)``, a lower confidence bound (LinUCB's upper
bound on the reward ``-delay``). Which devices update and read one model is the policy: one per
device (ANS), one per group of devices of a type (CANS's FedLinUCB with grouping), one for all
(FedLinUCB without grouping); a model's statistics are the sum of its devices' updates, as a
federated server aggregating them every round holds them.

Features of split ``s`` (after ANS, which builds them from the intermediate result's size and the
layer types left to the edge; the exact set and scaling are assumed): megabytes crossing the
network (the bandit replaces them by the transfer time at the bandwidth last measured), the shares of the net's units (conv, linear, residual blocks; other layers) the edge runs,
the edge part's GFLOPs, and a constant (the round trip)."""

from __future__ import annotations

import numpy as np

WEIGHTED = ("conv", "fc", "block")  # layer kinds with weights (repro.split.profile.kind)


def features(split_bytes: np.ndarray, kinds: list[str], flops: np.ndarray) -> np.ndarray:
    """(L, 5): one row per offloading split s = 0..L-1 of a net of L layers and its head (``kinds``
    and ``flops``: L + 1 units, the head last, which runs wherever the split leaves it): MB crossing
    split s, the shares of the net's units the edge runs (s..L) that are weighted and that are not,
    their GFLOPs, 1."""
    n = len(kinds) - 1
    weighted = np.array([k in WEIGHTED for k in kinds], float)
    tail = lambda v: np.cumsum(np.asarray(v, float)[::-1])[::-1]  # noqa: E731 (row s: the sum over units s..L)
    return np.column_stack([np.asarray(split_bytes[:n], float) / 1e6, tail(weighted)[:n] / (n + 1),
                            tail(1 - weighted)[:n] / (n + 1), tail(flops)[:n] / 1e9, np.ones(n)])


class LinUCB:
    """Ridge statistics of one delay model; ``lcb`` the optimistic delay of each row of ``X``."""

    def __init__(self, dim: int, alpha: float, l2_lambda: float = 1.0):
        if alpha < 0 or l2_lambda <= 0:
            raise ValueError(f"need alpha >= 0 and l2_lambda > 0, got {alpha} and {l2_lambda}")
        self.alpha = alpha
        self.A = l2_lambda * np.eye(dim)
        self.b = np.zeros(dim)

    def width(self, X: np.ndarray) -> np.ndarray:
        """The confidence width sqrt(x^T A^-1 x) of each row of ``X``."""
        return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", X, np.linalg.inv(self.A), X), 0.0))

    def lcb(self, X: np.ndarray) -> np.ndarray:
        return X @ np.linalg.solve(self.A, self.b) - self.alpha * self.width(X)

    def update(self, X: np.ndarray, y: np.ndarray) -> None:
        X = np.atleast_2d(X)
        self.A += X.T @ X
        self.b += X.T @ np.atleast_1d(y)


def choose(known: np.ndarray, model: LinUCB, X: np.ndarray) -> int:
    """The split of least optimistic latency: ``known[s]`` (the device's part; ``known[L]`` the whole
    net on the device, nothing to learn) plus the model's bound on the offloading delay for s < L.
    Ties go to the earlier split."""
    score = np.asarray(known, float).copy()
    score[: len(X)] += model.lcb(X)
    return int(np.argmin(score))


def disjoint(context: np.ndarray, arm: int, arms: int) -> np.ndarray:
    """Arm ``arm``'s feature vector with a model per arm (mabwiser's disjoint LinUCB) expressed in the
    shared model: the context in the arm's block, zeros elsewhere, so ``A`` is block diagonal."""
    x = np.zeros(arms * len(context))
    x[arm * len(context):(arm + 1) * len(context)] = context
    return x
