"""The runtime plugged into the shared trainer through TrainHooks.wrap_model: same training as plain."""

from __future__ import annotations

import numpy as np
import torch

from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.papers.superneurons.plan import RuntimeConfig
from repro.papers.superneurons.runtime import SuperNeuronsHooks
from repro.train import TrainConfig, train


def _run(hooks):
    torch.manual_seed(0)
    model = build_model("resnet20", width=4)
    cfg = TrainConfig(epochs=1, batch_size=32, lr=0.05, schedule="constant", warmup_epochs=0, channels_last=False,
                      eval_batch_size=64)
    return train(model, synthetic_split(96, seed=0), synthetic_split(64, seed=1), cfg, device="cpu", seed=0,
                 hooks=hooks)


def test_trainer_with_runtime_matches_plain():
    plain = _run(None)
    hooks = SuperNeuronsHooks(RuntimeConfig(recompute="all", pool=True, pool_budget_bytes=0))
    ours = _run(hooks)
    assert np.allclose(plain.history.train_loss, ours.history.train_loss, rtol=1e-4)
    assert np.allclose(plain.history.test_loss, ours.history.test_loss, rtol=1e-4)
    assert hooks.wrapped.pool.stats.offloads > 0  # the runtime really ran inside the trainer
    for a, b in zip(plain.model.parameters(), ours.model.parameters()):
        assert torch.allclose(a, b, atol=1e-5)
