"""The trainer's airbench94 options (off by default): each against a direct reference."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from repro.data.synthetic import synthetic_split
from repro.models import build_model
from repro.train import TrainConfig, TrainHooks, train
from repro.train.augment import DeviceAugment, epoch_plan
from repro.train.lookahead import Lookahead
from repro.train.schedule import lr_at
from repro.train.trainer import _param_groups, evaluate, make_grouped_sgd
from test_trainer import Killer  # tests/train/test_trainer.py: a simulated kill at a step

CFG = TrainConfig(epochs=2, batch_size=16, warmup_epochs=0.5, eval_batch_size=32, channels_last=False)


@pytest.fixture(scope="module")
def data():
    return synthetic_split(96, seed=0), synthetic_split(32, seed=1)


def _net():
    torch.manual_seed(0)
    return build_model("airbench94", widths=(4, 8, 8))


def test_triangle_schedule():
    lrs = [lr_at(s, 100, 2.0, 23, "triangle", start=0.2, end=0.07) for s in range(101)]
    assert lrs[0] == pytest.approx(0.4) and lrs[23] == pytest.approx(2.0) and lrs[100] == pytest.approx(0.14)
    assert lrs[10] == pytest.approx(2.0 * (0.2 + 0.8 * 10 / 23))
    assert max(lrs) == pytest.approx(2.0)
    assert lr_at(5, 100, 1.0, 10, "cosine") == lr_at(5, 100, 1.0, 10, "cosine", start=0.5, end=0.5)  # others ignore them


def test_reflect_crop_matches_padded_reference():
    images = torch.randint(0, 256, (20, 8, 8, 3), dtype=torch.uint8)
    plan = epoch_plan(20, 10, seed=3, epoch=0, pad=2)
    assert plan[..., 1:3].max() <= 4
    aug = DeviceAugment([0.5] * 3, [0.25] * 3, 8, 8, "cpu", pad=2, pad_mode="reflect")
    out = aug.crop_flip(images, plan[0])
    for b, (i, dy, dx, flip) in enumerate(plan[0].tolist()):
        padded = F.pad(images[i].permute(2, 0, 1).float()[None], (2, 2, 2, 2), mode="reflect")[0]
        ref = padded[:, dy:dy + 8, dx:dx + 8].permute(1, 2, 0).to(torch.uint8)
        assert torch.equal(out[b], ref.flip(1) if flip else ref)
    with pytest.raises(ValueError, match="pad_mode"):
        DeviceAugment([0.5] * 3, [0.25] * 3, 8, 8, "cpu", pad_mode="wrap")


def test_alternating_flip():
    plans = [epoch_plan(100, 10, seed=1, epoch=e, flip="alternate") for e in range(3)]
    random = epoch_plan(100, 10, seed=1, epoch=0)
    assert torch.equal(plans[0][..., :3], random[..., :3])  # same shuffle and crops as random flips

    def flips(plan):
        f = torch.empty(100, dtype=torch.int64)
        f[plan[..., 0].flatten()] = plan[..., 3].flatten()
        return f

    f0, f1, f2 = map(flips, plans)
    assert torch.equal(f1, 1 - f0) and torch.equal(f2, f0)  # each image seen both ways every two epochs
    assert 30 < f0.sum() < 70
    with pytest.raises(ValueError, match="flip"):
        epoch_plan(100, 10, seed=1, epoch=0, flip="sometimes")


def test_translate_tta_is_airbench_six_views():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    images = torch.randint(0, 256, (6, 8, 8, 3), dtype=torch.uint8)
    labels = torch.randint(0, 5, (6,))
    aug = DeviceAugment([0.5] * 3, [0.25] * 3, 8, 8, "cpu", channels_last=False)
    x = aug.normalize(images)
    model(x)

    def mirror(v):
        return 0.5 * model(v) + 0.5 * model(v.flip(-1))

    padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
    ref = 0.5 * mirror(x) + 0.25 * (mirror(padded[:, :, 0:8, 0:8]) + mirror(padded[:, :, 2:10, 2:10]))
    loss, top1 = evaluate(model, images, labels, aug, batch_size=4, flip=True, translate=True)
    assert loss == pytest.approx(F.cross_entropy(ref, labels).item(), rel=1e-5)
    assert top1 == pytest.approx(100.0 * (ref.argmax(1) == labels).float().mean().item())
    plain = evaluate(model, images, labels, aug, batch_size=4, flip=True)[0]
    assert plain != pytest.approx(loss)
    with pytest.raises(ValueError, match="flip"):
        evaluate(model, images, labels, aug, translate=True)


def test_param_groups_scale_bn_biases_and_split_frozen():
    model = _net()
    cfg = dataclasses.replace(CFG, lr=2.0, weight_decay=1e-3, bias_lr_scale=64.0, freeze={"whiten.bias": 3})
    groups = _param_groups(model, list(model.parameters()), cfg)
    opt, lrs = make_grouped_sgd(groups, cfg, "cpu")
    assert [len(g["params"]) for g in opt.param_groups] == [1, 6, len(list(model.parameters())) - 7]
    assert opt.param_groups[0]["params"][0] is model.whiten.bias and groups[0]["train_epochs"] == 3
    assert lrs[1].item() == 128.0 and opt.param_groups[1]["weight_decay"] == pytest.approx(1e-3 / 64)
    assert opt.param_groups[1]["params"][0] is model.group1.norm1.bias
    assert lrs[2].item() == 2.0 and opt.param_groups[2]["weight_decay"] == 1e-3
    assert len(_param_groups(model, list(model.parameters()), CFG)) == 1  # defaults: one group, as before
    with pytest.raises(ValueError, match="unknown parameters.*nope"):
        _param_groups(model, list(model.parameters()), dataclasses.replace(CFG, freeze={"nope": 1}))


class Snap(TrainHooks):
    def __init__(self):
        self.biases = []

    def on_epoch_end(self, model, epoch, row):
        self.biases.append(model.whiten.bias.detach().clone())


def test_freeze_stops_training_after_its_epochs(data):
    model, snap = _net(), Snap()
    start = model.whiten.bias.detach().clone()
    train(model, *data, dataclasses.replace(CFG, epochs=3, freeze={"whiten.bias": 1}), hooks=snap)
    assert not torch.equal(snap.biases[0], start)  # trained in epoch 1
    assert torch.equal(snap.biases[1], snap.biases[0]) and torch.equal(snap.biases[2], snap.biases[0])
    with pytest.raises(ValueError, match="freeze"):
        train(_net(), *data, dataclasses.replace(CFG, freeze={"whiten.bias": -1}))


def test_lookahead_update_rule():
    net = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(1.0)
    la = Lookahead(net, every=2, base=0.5, total_steps=4)
    with torch.no_grad():
        net.weight.fill_(3.0)
    la.after_step(1)  # not an update step
    assert net.weight.item() == 3.0
    la.after_step(2)  # decay 0.5 * (2/4)^3 = 1/16: avg = 1/16 * 1 + 15/16 * 3
    assert net.weight.item() == pytest.approx(1 / 16 + 45 / 16) and la.average[0].item() == net.weight.item()
    kept = net.weight.item()
    with torch.no_grad():
        net.weight.fill_(10.0)
    la.after_step(3)
    la.after_step(4)  # decay 0.5: avg = 0.5 kept + 0.5 * 10; then the final update sets net = avg
    assert net.weight.item() == pytest.approx(0.5 * kept + 5.0)
    with pytest.raises(ValueError, match="every"):
        Lookahead(net, every=0, base=0.5, total_steps=4)


def test_airbench_recipe_trains_and_resumes_with_lookahead(data, tmp_path):
    cfg = dataclasses.replace(CFG, epochs=3, schedule="triangle", lr_start=0.2, lr_end=0.07, nesterov=True,
                              label_smoothing=0.2, crop_pad=2, pad_mode="reflect", flip="alternate",
                              eval_flip=True, eval_translate=True, bias_lr_scale=8.0,
                              freeze={"whiten.bias": 2}, lookahead_every=5)
    straight = train(_net(), *data, cfg, hooks=Killer(), seed=2)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(KeyboardInterrupt):
        train(_net(), *data, cfg, hooks=Killer(8), seed=2, checkpoint=ckpt)  # 6 steps/epoch: after epoch 1
    resumed = train(_net(), *data, cfg, hooks=Killer(), seed=2, checkpoint=ckpt)
    assert resumed.resumed_epochs == 1
    sa, sb = straight.model.state_dict(), resumed.model.state_dict()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert straight.history.test_top1.tolist() == resumed.history.test_top1.tolist()


def test_fingerprint_unchanged_at_defaults_and_changed_by_an_option():
    """A checkpoint written before these options existed still resumes (its fingerprint covered the
    fields below only); setting an option makes it refuse such a checkpoint."""
    import hashlib
    import json

    from repro.train.trainer import _fingerprint

    model, hooks, cfg = _net(), TrainHooks(), TrainConfig()
    legacy = ("epochs", "batch_size", "lr", "momentum", "weight_decay", "nesterov", "schedule", "warmup_epochs",
              "label_smoothing", "augment", "eval_flip", "precision", "channels_last")
    arch = [(k, list(v.shape)) for k, v in model.state_dict().items()]
    blob = json.dumps({"cfg": {k: getattr(cfg, k) for k in legacy}, "seed": 0, "arch": arch,
                       "hooks": type(hooks).__qualname__, "n": [10, 5]}, sort_keys=True)
    assert _fingerprint(cfg, 0, model, hooks, 10, 5) == hashlib.sha256(blob.encode()).hexdigest()
    for change in ({"lookahead_every": 5}, {"freeze": {"whiten.bias": 1}}, {"pad_mode": "reflect"}):
        assert _fingerprint(dataclasses.replace(cfg, **change), 0, model, hooks, 10, 5) != \
            _fingerprint(cfg, 0, model, hooks, 10, 5), change
