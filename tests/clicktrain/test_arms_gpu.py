"""The pruning arms on a CUDA GPU (skipped without one): every phase runs as its own CUDA graph,
the masks hold in the final weights, and training matches eager mode in outcome."""

from __future__ import annotations

import pytest
import torch

from conftest import prepared_splits
from repro.papers.clicktrain.experiment import (ADMMParams, ClickTrainParams, PruneTrainParams, Sparse24Params, admm,
                                         clicktrain, prunetrain, sparse24)
from repro.experiment import Context

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SMALL = dict(model="resnet20", batch_size=128, n_train=4096, checkpoint=False, warmup_epochs=0.5)
ARMS = {
    "clicktrain": (clicktrain, ClickTrainParams, dict(epochs=8), ["dense", "lasso", "masked"]),
    "admm": (admm, ADMMParams, dict(epochs=3, admm_epochs=3, retrain_epochs=2), ["dense", "admm", "retrain"]),
    "prunetrain": (prunetrain, PruneTrainParams, dict(epochs=4, channel_threshold=0.5), ["lasso"]),
    "sparse24": (sparse24, Sparse24Params, dict(epochs=4), ["dense", "masked"]),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 4096, 1000)


def _run(name, prepared, tmp_path, cuda_graph):
    fn, params, kw, _ = ARMS[name]
    p = params(**SMALL, **kw, cuda_graph=cuda_graph)
    return fn(p, Context(out_dir=tmp_path, scale="paper", device="cuda", seed=0, inputs=prepared))


@pytest.mark.parametrize("name", list(ARMS))
def test_arm_phases_run_as_cuda_graphs(name, prepared, tmp_path):
    graph = _run(name, prepared, tmp_path / "graph", cuda_graph=True)
    eager = _run(name, prepared, tmp_path / "eager", cuda_graph=False)
    m, epochs = graph.metrics, graph.tables["epochs"]
    assert list(dict.fromkeys(epochs.phase)) == ARMS[name][3]
    modes = dict(part.split(": ") for part in graph.tags["mode"].split(", "))
    assert set(modes.values()) == {"cudagraph"}, graph.tags
    assert graph.tags["mode_notes"] == "none"
    # the constraints hold in the final weights of the captured run
    for key in ("pattern_violations", "nm_violations", "mask_violations"):
        assert m.get(key, 0) == 0, key
    if name in ("clicktrain", "admm"):
        assert 7 < m["compression"] < 9.5
    # same batches, same schedule: outcomes agree (values differ by rounding, amplified by training)
    assert m["final_top1"] > 60 and abs(m["final_top1"] - eager.metrics["final_top1"]) < 15
    assert m["compression"] == pytest.approx(eager.metrics["compression"], rel=0.05)
    print(name, "graph/eager epoch s:", round(m["epoch_s_mean"], 3), round(eager.metrics["epoch_s_mean"], 3),
          "top-1:", m["final_top1"], eager.metrics["final_top1"])
