"""The trainer's fast modes on a CUDA GPU (skipped without one): they must run, report their mode,
and train like eager mode."""

from __future__ import annotations

import pytest
import torch

from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.train import TrainConfig, TrainHooks, train

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def data():
    return synthetic_split(4096, seed=0), synthetic_split(1000, seed=1)


@pytest.fixture(scope="module")
def eager(data):
    return _run(data)


def _run(data, **kw):
    if kw.get("compile"):
        torch._dynamo.reset()  # compiled code and recompile counts of earlier tests in this process stay out
    torch.manual_seed(0)
    cfg = TrainConfig(**{"epochs": 6, "batch_size": 128, "warmup_epochs": 0.5, **kw})
    return train(build_model("resnet20"), *data, cfg, device="cuda")


@pytest.mark.parametrize("kw,mode", [
    ({}, "eager"),
    ({"cuda_graph": True}, "cudagraph"),
    ({"cuda_graph": True, "precision": "bf16"}, "cudagraph"),
    ({"compile": True}, "compile"),
    ({"compile": True, "cuda_graph": True}, "compile+cudagraph"),
])
def test_fast_modes_train_like_eager(data, eager, kw, mode):
    fast = _run(data, **kw)
    assert fast.mode == mode, fast.notes
    assert fast.notes == [] and fast.data_on_device
    # Same batches and learning rates; rounding differs (TF32/bf16, fused kernels, algorithms) and
    # training amplifies it, so compare outcomes, not values.
    assert fast.final_top1 > 80 and eager.final_top1 > 80  # colour-coded classes: chance is 10%
    # A broken fast mode (a step that does not update the captured weights, stale statistics) stays
    # near ln(10) = 2.3. The bar is not tighter: in the full GPU suite on the H200 (session 9) a
    # compile+cudagraph run ended its last epoch at 0.19 against eager's 0.001 (top-1 over 80, and
    # under 0.1 when run alone): one late loss spike of a 6-epoch run is not a mode fault.
    assert fast.history.train_loss.iloc[-1] < max(0.3, 2 * eager.history.train_loss.iloc[-1] + 0.1)
    print(mode, "epoch s:", fast.history.train_s.round(3).tolist())


def test_graph_unsafe_hooks_fall_back_to_eager(data):
    class Offload(TrainHooks):
        def saved_tensors_hooks(self):
            return torch.autograd.graph.save_on_cpu(pin_memory=True)

    torch.manual_seed(0)
    result = train(build_model("resnet20"), *data, TrainConfig(epochs=1, cuda_graph=True), device="cuda",
                   hooks=Offload())
    assert result.mode == "eager" and "graph_safe" in result.notes[0]


def test_graph_safe_hook_is_captured(data):
    class Mask(TrainHooks):
        graph_safe = True

        def after_optimizer_step(self, model):  # keep the first conv's first filter at zero
            with torch.no_grad():
                model[0].weight[0].zero_()

    torch.manual_seed(0)
    result = train(build_model("resnet20"), *data, TrainConfig(epochs=2, cuda_graph=True), device="cuda",
                   hooks=Mask())
    assert result.mode == "cudagraph" and not result.model[0].weight[0].any()


class Kill(TrainHooks):
    """A simulated kill at the end of epoch ``at`` (before its checkpoint is written)."""

    def __init__(self, at=None):
        self.at = at

    def on_epoch_end(self, model, epoch, row):
        if epoch == self.at:
            raise KeyboardInterrupt


def test_resume_in_cudagraph_mode(data, tmp_path):

    cfg = TrainConfig(epochs=3, cuda_graph=True)
    torch.manual_seed(0)
    straight = train(build_model("resnet20"), *data, cfg, device="cuda", hooks=Kill())
    ckpt = tmp_path / "c.pt"
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        train(build_model("resnet20"), *data, cfg, device="cuda", hooks=Kill(at=2), checkpoint=ckpt)
    torch.manual_seed(0)
    resumed = train(build_model("resnet20"), *data, cfg, device="cuda", hooks=Kill(), checkpoint=ckpt)
    assert resumed.resumed_epochs == 1 and resumed.mode == "cudagraph"
    # cuDNN autotuning may pick other algorithms in another process, so equal up to rounding
    assert resumed.final_top1 == pytest.approx(straight.final_top1, abs=1.0)


def test_a_new_step_key_recaptures_the_step(data):
    """Epoch 1 dense, then a mask: the first captured graph must not run in epoch 2."""

    class Phased(TrainHooks):
        graph_safe = True
        masked = False

        def step_key(self):
            return self.masked

        def after_optimizer_step(self, model):
            if self.masked:
                with torch.no_grad():
                    model[0].weight[0].zero_()

        def on_epoch_end(self, model, epoch, row):
            if epoch == 1:
                assert model[0].weight[0].any()  # dense epoch: untouched
            self.masked = True

    torch.manual_seed(0)
    result = train(build_model("resnet20"), *data, TrainConfig(epochs=2, cuda_graph=True), device="cuda",
                   hooks=Phased())
    assert result.mode == "cudagraph" and not result.model[0].weight[0].any()


def test_airbench_options_under_cuda_graph(data):
    """airbench94's recipe (per-group device lrs, freeze by lr 0, lookahead between replays, reflect
    crops, six-view TTA) captured as a CUDA graph: it learns, the frozen bias stops moving, and it
    trains like eager mode."""
    from repro.models.airbench import AirBench
    from repro.train.augment import first_batch

    class Snap(TrainHooks):
        graph_safe = True

        def __init__(self):
            self.biases = []

        def on_epoch_end(self, model, epoch, row):
            self.biases.append(model.whiten.bias.detach().clone())

    def run(cuda_graph):
        torch.manual_seed(0)
        model = AirBench()
        model.init_whitening(first_batch(data[0], 1000, "cpu")[0])
        cfg = TrainConfig(epochs=4, batch_size=256, lr=0.375, momentum=0.85, nesterov=True, weight_decay=0.00133,
                          bias_lr_scale=64.0, schedule="triangle", warmup_epochs=0.9, lr_start=0.2, lr_end=0.07,
                          label_smoothing=0.2, crop_pad=2, pad_mode="reflect", flip="alternate", eval_flip=True,
                          eval_translate=True, freeze={"whiten.bias": 2}, lookahead_every=5, precision="bf16",
                          cuda_graph=cuda_graph)
        snap = Snap()
        return train(model, *data, cfg, device="cuda", hooks=snap), snap

    (graph, snap), (eager, _) = run(True), run(False)
    assert graph.mode == "cudagraph" and graph.notes == []
    assert graph.final_top1 > 80 and eager.final_top1 > 80
    # trained in epochs 1-2, then frozen (lr 0); epoch 3's first lookahead update (step 35) still
    # moves it once towards the average, as airbench's requires_grad=False does, and then it stays
    assert snap.biases[0].any() and torch.equal(snap.biases[2], snap.biases[3])
