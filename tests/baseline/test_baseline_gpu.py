"""The baseline experiments on a CUDA GPU in their paper-scale execution modes, on a small split."""

from __future__ import annotations

import pytest
import torch

from repro.train.arm import TrainParams
from repro.papers.baseline.experiment import BenchParams, train_cifar, trainer_bench
from conftest import prepared_splits
from repro.experiment import Context

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepared_splits(tmp_path_factory.mktemp("prepared"), 5000, 1000)


# VGG-16 at lr 0.1 needs more than 3 short epochs (117 steps) to leave chance on 5,000 images;
# 8 epochs at lr 0.05 cost under a second on an H200.
@pytest.mark.parametrize("model,precision,epochs,lr", [("resnet32", "fp32", 3, 0.1), ("vgg16", "bf16", 8, 0.05)])
def test_train_cifar_cudagraph(tmp_path, prepared, model, precision, epochs, lr):
    p = TrainParams(model=model, epochs=epochs, lr=lr, precision=precision, cuda_graph=True)
    result = train_cifar(p, Context(out_dir=tmp_path, scale="paper", device="cuda", inputs=prepared))
    assert result.tags["mode"] == "cudagraph" and result.tags["mode_notes"] == "none"
    assert result.metrics["final_top1"] > 80  # colour-coded classes: chance is 10%
    print(model, result.metrics)


def test_trainer_bench_cuda(tmp_path, prepared):
    p = BenchParams(epochs=2, ref_epochs=2, ref_workers=4, cuda_graph=True)
    result = trainer_bench(p, Context(out_dir=tmp_path, scale="paper", device="cuda", inputs=prepared))
    assert result.metrics["speedup"] > 1
    print(result.metrics)
