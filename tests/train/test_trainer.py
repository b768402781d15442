"""The trainer on the CPU: it learns, a killed run resumes to exactly the uninterrupted result,
hooks are called and checkpointed, fast modes fall back with a reason."""

from __future__ import annotations

import pytest
import torch

from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.train import TrainConfig, TrainHooks, fast_mode_conflict, train
from repro.train.checkpoint import CheckpointMismatch

CFG = TrainConfig(epochs=3, batch_size=16, warmup_epochs=0.5, eval_batch_size=32)


@pytest.fixture(scope="module")
def data():
    return synthetic_split(128, seed=0), synthetic_split(32, seed=1)


def _model():
    torch.manual_seed(0)
    return build_model("cifar_resnet", depth=8, width=4)


class Killer(TrainHooks):
    """Raises (a simulated kill) at optimiser step ``at``; the resumed run uses kill_at=None."""

    def __init__(self, kill_at=None):
        self.kill_at, self.steps = kill_at, 0

    def after_optimizer_step(self, model):
        self.steps += 1
        if self.steps == self.kill_at:
            raise KeyboardInterrupt("killed")


def _assert_same(a, b):
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    cols = ["epoch", "lr", "train_loss", "train_top1", "test_loss", "test_top1"]
    assert a.history[cols].equals(b.history[cols])


# 8 steps per epoch: step 17 is the first after epoch 2's checkpoint, step 12 is in the middle of epoch 2
@pytest.mark.parametrize("kill_at,done", [(17, 2), (12, 1)], ids=["after-checkpoint", "mid-epoch"])
def test_resume_equals_uninterrupted(data, tmp_path, kill_at, done):
    straight = train(_model(), *data, CFG, hooks=Killer(), seed=5)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        train(_model(), *data, CFG, hooks=Killer(kill_at), seed=5, checkpoint=ckpt)
    assert ckpt.is_file()
    resumed = train(_model(), *data, CFG, hooks=Killer(), seed=5, checkpoint=ckpt)
    assert resumed.resumed_epochs == done
    _assert_same(straight, resumed)
    again = train(_model(), *data, CFG, hooks=Killer(), seed=5, checkpoint=ckpt)  # finished: nothing left to do
    assert again.resumed_epochs == 3
    _assert_same(straight, again)


def test_checkpoint_from_other_config_is_refused(data, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    train(_model(), *data, TrainConfig(epochs=1, batch_size=16), checkpoint=ckpt)
    with pytest.raises(CheckpointMismatch, match="different training configuration"):
        train(_model(), *data, TrainConfig(epochs=2, batch_size=16), checkpoint=ckpt)
    train(_model(), *data, TrainConfig(epochs=1, batch_size=16, eval_batch_size=7), checkpoint=ckpt)  # mode only


def test_learns_and_reports(data):
    result = train(_model(), *data, TrainConfig(epochs=4, batch_size=16, warmup_epochs=0.5))
    h = result.history
    assert list(h.epoch) == [1, 2, 3, 4] and result.mode == "eager" and result.notes == []
    assert h.test_top1.iloc[-1] > 40  # colour-coded classes: chance is 10%
    assert (h.images_per_s > 0).all() and (h.peak_mem_bytes > 0).all()
    assert result.final_top1 == h.test_top1.iloc[-1] and result.best_top1 == h.test_top1.max()
    assert result.steps_per_epoch == 8 and result.data_on_device


class Recorder(TrainHooks):
    def __init__(self):
        self.calls = {"wrap": 0, "reg": 0, "backward": 0, "step": 0, "epoch": 0, "packed": 0}
        self.grads_seen = False

    def wrap_model(self, model):
        self.calls["wrap"] += 1
        return model

    def saved_tensors_hooks(self):
        def pack(t):
            self.calls["packed"] += 1
            return t

        return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)

    def loss_regularizer(self, model):
        self.calls["reg"] += 1
        return 1e-4 * sum(p.pow(2).sum() for p in model.parameters())

    def after_backward(self, model):
        self.calls["backward"] += 1
        self.grads_seen = all(p.grad is not None for p in model.parameters())

    def after_optimizer_step(self, model):
        self.calls["step"] += 1

    def on_epoch_end(self, model, epoch, row):
        self.calls["epoch"] += 1
        return {"hook_metric": epoch * 10}

    def state_dict(self):
        return {"epochs_seen": self.calls["epoch"]}


def test_hooks_are_called_and_force_eager(data):
    hooks = Recorder()
    result = train(_model(), *data, TrainConfig(epochs=2, batch_size=16, compile=True), hooks=hooks)
    c = hooks.calls
    assert c["wrap"] == 1 and c["reg"] == c["backward"] == c["step"] == 16 and c["epoch"] == 2
    assert c["packed"] > 0 and hooks.grads_seen
    assert list(result.history.hook_metric) == [10, 20]
    assert result.mode == "eager" and "does not declare compile_safe" in result.notes[0]


class ResumeSpy(Killer):
    """Records the order of load_state_dict, on_resume and the first step."""

    def __init__(self, kill_at=None):
        super().__init__(kill_at)
        self.order = []

    def load_state_dict(self, state):
        self.order.append("load")

    def on_resume(self, model):
        self.order.append(("resume", next(model.parameters()).device.type))

    def after_optimizer_step(self, model):
        if "step" not in self.order:
            self.order.append("step")
        super().after_optimizer_step(model)


def test_on_resume_follows_the_load_before_any_step(data, tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        train(_model(), *data, CFG, hooks=ResumeSpy(kill_at=10), checkpoint=ckpt)
    spy = ResumeSpy()
    train(_model(), *data, CFG, hooks=spy, checkpoint=ckpt)
    assert spy.order == ["load", ("resume", "cpu"), "step"]


def test_fast_mode_rules():
    assert fast_mode_conflict(TrainHooks(), compile=True, cuda_graph=True) is None
    assert "graph_safe" in fast_mode_conflict(Recorder(), compile=False, cuda_graph=True)

    class SafeMask(TrainHooks):
        graph_safe = True

        def after_optimizer_step(self, model):
            pass

    assert fast_mode_conflict(SafeMask(), compile=False, cuda_graph=True) is None
    assert SafeMask().per_step_overrides() == ["after_optimizer_step"]


def test_cuda_graph_request_on_cpu_says_so(data):
    result = train(_model(), *data, TrainConfig(epochs=1, batch_size=16, cuda_graph=True))
    assert result.mode == "eager" and "needs a CUDA device" in result.notes[0]


def test_bf16_and_contiguous_run(data):
    result = train(_model(), *data, TrainConfig(epochs=1, batch_size=16, precision="bf16", channels_last=False))
    assert result.history.train_loss.notna().all()


def test_compile_failure_falls_back_to_eager(data, monkeypatch):
    def broken_compile(model, **kw):
        def run(*args):
            raise RuntimeError("no C++ compiler\nmore detail")
        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    result = train(_model(), *data, TrainConfig(epochs=1, batch_size=16, compile=True))
    assert result.mode == "eager" and result.notes == [
        "torch.compile failed (RuntimeError: no C++ compiler); fell back"]
    assert result.history.train_loss.notna().all()



def test_begin_epoch_restarts_warm_up_when_the_step_key_changes():
    """The CUDA-graph bookkeeping, without a GPU: a new key (a new phase) drops the captured step."""
    from repro.train.step import TrainStep

    class Phased(TrainHooks):
        graph_safe = True
        phase = "dense"

        def step_key(self):
            return self.phase

    hooks = Phased()
    model = torch.nn.Linear(2, 2)
    step = TrainStep(model, torch.optim.SGD(model.parameters(), lr=0.1), hooks, device="cpu")
    step.cuda_graph = True  # as on a GPU; no step is run here
    step.begin_epoch()
    step.graph, step.calls = "captured", 5
    step.begin_epoch()  # same phase: the captured step stays
    assert (step.graph, step.calls, step.graph_key) == ("captured", 5, "dense")
    hooks.phase = "masked"
    step.begin_epoch()
    assert (step.graph, step.calls, step.graph_key) == (None, 0, "masked")


def test_eval_flip_averages_the_logits_of_image_and_mirror(data):
    from repro.train.augment import DeviceAugment
    from repro.train.trainer import evaluate

    _, test = data
    model = _model().eval()
    images, labels = torch.from_numpy(test.images), torch.from_numpy(test.labels)
    augment = DeviceAugment((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), 32, 32, "cpu", channels_last=False)
    with torch.no_grad():
        x = augment.normalize(images)
        mean_logits = (model(x) + model(x.flip(3))) / 2
    want_loss = torch.nn.functional.cross_entropy(mean_logits, labels.long()).item()
    want_top1 = 100.0 * (mean_logits.argmax(1) == labels).float().mean().item()
    loss, top1 = evaluate(model, images, labels, augment, batch_size=10, flip=True)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert top1 == pytest.approx(want_top1)
    assert evaluate(model, images, labels, augment, batch_size=10)[0] != pytest.approx(loss, rel=1e-6)
