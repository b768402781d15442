"""The baseline experiments on a CUDA GPU in their paper-scale execution modes, on a small split."""

from __future__ import annotations

import pytest
import torch

from repro.baseline.experiment import BenchParams, TrainParams, train_cifar, trainer_bench
from repro.data.arrays import write_split
from repro.data.synthetic import synthetic_split
from repro.experiment import Context

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    d = tmp_path_factory.mktemp("prepared")
    write_split(d / "train.npz", synthetic_split(5000, seed=0))
    write_split(d / "test.npz", synthetic_split(1000, seed=1))
    return {"train": d / "train.npz", "test": d / "test.npz"}


@pytest.mark.parametrize("model,precision", [("resnet32", "fp32"), ("vgg16", "bf16")])
def test_train_cifar_cudagraph(tmp_path, prepared, model, precision):
    p = TrainParams(model=model, epochs=3, precision=precision, cuda_graph=True)
    result = train_cifar(p, Context(out_dir=tmp_path, scale="paper", device="cuda", inputs=prepared))
    assert result.tags["mode"] == "cudagraph" and result.tags["mode_notes"] == "none"
    assert result.metrics["final_top1"] > 80  # colour-coded classes: chance is 10%
    print(model, result.metrics)


def test_trainer_bench_cuda(tmp_path, prepared):
    p = BenchParams(epochs=2, ref_epochs=2, ref_workers=4, cuda_graph=True)
    result = trainer_bench(p, Context(out_dir=tmp_path, scale="paper", device="cuda", inputs=prepared))
    assert result.metrics["speedup"] > 1
    print(result.metrics)
