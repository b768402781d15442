"""Regression latency predictors, one per layer type and processor (Edgent sec. IV, after
Neurosurgeon): a layer's latency as a non-negative linear function of its FLOPs, input bytes and
output bytes plus a constant (the launch or dispatch cost), fitted by non-negative least squares on
profiled layers. Each row's residual is taken relative to its measured time (weight 1 / time): the
error the predictors are judged on is relative, and layers span three orders of magnitude (a 4 us
flatten, a 600 us residual block), so an unweighted fit sacrifices every small layer to the largest.
Fitted on profiles of other networks (other widths) than the one predicted, so the reported error is
out of sample."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import nnls

FEATURES = ("flops", "in_bytes", "out_bytes")


def _design(df: pd.DataFrame, scale: np.ndarray) -> np.ndarray:
    return np.column_stack([df[list(FEATURES)].to_numpy(float) / scale, np.ones(len(df))])


class Predictor:
    """``fit(profile rows)`` per kind; ``predict(rows)`` per row. A kind never seen in the fit is
    predicted from all kinds' pooled fit."""

    def __init__(self):
        self.coef: dict[str, np.ndarray] = {}
        self.scale = np.ones(len(FEATURES))

    def fit(self, df: pd.DataFrame) -> "Predictor":
        if df.empty:
            raise ValueError("no profiled layers to fit the predictors on")
        self.scale = np.maximum(df[list(FEATURES)].to_numpy(float).max(axis=0), 1.0)
        for name, rows in [("*", df), *df.groupby("kind")]:
            t = rows["time_s"].to_numpy(float)
            if (t <= 0).any():
                raise ValueError(f"profiled layers of kind {name!r} with a time <= 0: not a measurement")
            self.coef[name], _ = nnls(_design(rows, self.scale) / t[:, None], np.ones(len(t)))
        return self

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        out = np.empty(len(df))
        for name, rows in df.groupby("kind", sort=False):
            idx = df.index.get_indexer(rows.index)
            out[idx] = _design(rows, self.scale) @ self.coef.get(name, self.coef["*"])
        return out


def relative_errors(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    measured = np.asarray(measured, float)
    return np.abs(np.asarray(predicted, float) - measured) / measured
