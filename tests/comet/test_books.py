"""Codec v4's per-slot code books on the CPU (repro.papers.comet.books through the NumPy twin): a
slot reuses its book, a drifted distribution refreshes it once (also one grown more compressible,
where the old book's bits per symbol fall), a new (numel, eb) starts a new one, the hooks count and
checkpoint them, and training with cached books gives v3's gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from repro.models import build_model
from repro.papers.comet import books, codec, codec_v4
from repro.papers.comet.hooks import make_hooks


def relu_like(n: int, scale: float, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    x = np.maximum(np.convolve(rng.standard_normal(n + 15), np.ones(16) / 4, "valid"), 0) * scale
    return torch.from_numpy(x.astype(np.float32))


def test_a_slot_reuses_its_book_and_a_drift_refreshes_it_once():
    n = 32 * codec.BLOCK
    sb = books.SlotBooks(tol=0.05)

    def step(*tensors):
        sb.begin_step()
        out = [sb.compress(t, 0.05) for t in tensors]
        for t, c in zip(tensors, out):
            assert np.abs(codec_v4.decompress(c) - t.numpy()).max() <= np.float32(0.05)
        return out

    first = step(relu_like(n, 1, 0), relu_like(n, 1, 1))
    assert sb.counts == dict(books_built=2, book_refreshes=0, book_tensors=0)
    assert all(c.book is None for c in first)  # the first step: each tensor's own book
    b0, b1 = sb.books[0][1], sb.books[1][1]
    assert b0.lengths.min() >= 1  # covering
    second = step(relu_like(n, 1, 2), relu_like(n, 1, 3))  # other draws of the same distributions
    assert sb.counts == dict(books_built=2, book_refreshes=0, book_tensors=2)
    assert second[0].book is b0 and second[1].book is b1 and second[1].lengths is b1.stored
    third = step(relu_like(n, 1, 4), relu_like(n, 30, 5))  # slot 1 drifts: 30x the values, longer codes
    assert sb.counts == dict(books_built=2, book_refreshes=1, book_tensors=4)
    assert third[1].book is b1 and sb.books[1][1] is not b1 and sb.books[0][1] is b0  # coded, then refreshed
    assert sb.books[1][1].bits_per_symbol > (1 + sb.tol) * b1.bits_per_symbol
    step(relu_like(n, 1, 6), relu_like(n, 30, 7))  # the drifted slot settles on its new book
    assert sb.counts == dict(books_built=2, book_refreshes=1, book_tensors=6)
    # slot 0 grows more compressible (1/30 the values): its old book spends fewer bits per symbol than
    # at build, but a new book would spend far fewer still: one refresh
    b0_hists = codec_v4.encode(relu_like(n, 1 / 30, 8).numpy(), 0.05)[1]
    assert b0.bits(b0_hists) < b0.bits_per_symbol and b0.drift(b0_hists) > 1.5
    step(relu_like(n, 1 / 30, 8), relu_like(n, 30, 9))
    step(relu_like(n, 1 / 30, 10), relu_like(n, 30, 11))
    assert sb.counts == dict(books_built=2, book_refreshes=2, book_tensors=10)
    assert sb.books[0][1] is not b0
    # a new numel (another batch) or a new eb starts a new book for the slot
    sb.begin_step()
    sb.compress(relu_like(n + 1, 1, 12), 0.05)
    sb.compress(relu_like(n, 30, 13), 0.1)
    assert sb.counts == dict(books_built=4, book_refreshes=2, book_tensors=10)
    assert sb.books[0][0] == (n + 1, float(np.float32(0.05))) and sb.books[1][1] is not b1


def test_books_code_any_later_tensor_and_refuse_nan():
    sb = books.SlotBooks()
    sb.compress(relu_like(8 * codec.BLOCK, 1, 0), 0.1)
    sb.begin_step()  # all zeros, then a wide Gaussian with escapes, on the same slot's book
    wide = torch.randn(8 * codec.BLOCK) * 1e3
    for t in (torch.zeros(8 * codec.BLOCK), wide):
        c = sb.compress(t, 0.1)
        assert c.book is not None
        assert np.abs(codec_v4.decompress(c) - t.numpy()).max() <= np.float32(0.1)
        sb.begin_step()
    assert sb.counts["book_tensors"] == 2 and sb.counts["book_refreshes"] == 1  # zeros: no symbols; wide: drift
    bad = relu_like(8 * codec.BLOCK, 1, 1)
    bad[77] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        sb.compress(bad, 0.1)
    with pytest.raises(ValueError, match="tolerance"):
        books.SlotBooks(tol=-0.1)


def _steps(hooks, steps: int, seed: int = 0) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    model = build_model("resnet20", num_classes=10, width=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    hooks.wrap_model(model)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(4, 3, 32, 32, generator=g), torch.randint(0, 10, (4,), generator=g)
        opt.zero_grad(set_to_none=True)
        with hooks.saved_tensors_hooks():
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        hooks.after_backward(model)
        opt.step()
        losses.append(loss.detach())
    return losses + [torch.cat([p.detach().flatten() for p in model.parameters()])]


def test_hooks_train_with_cached_books_like_v3_and_checkpoint_the_counts():
    """Cached books change the entropy stage only: three steps give v3's losses and weights exactly."""
    v4 = make_hooks("fixed", eb=0.05, codec_version="v4", book_tol=0.05)
    got = _steps(v4, 3)
    want = _steps(make_hooks("fixed", eb=0.05), 3)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    slots = len(v4.books.books)
    assert slots >= 10
    m = v4.codec_metrics()
    assert m["codec_books_built"] == slots and m["codec_book_tensors"] == 2 * slots
    assert m["codec_book_refreshes"] <= slots
    resumed = make_hooks("fixed", eb=0.05, codec_version="v4")
    resumed.load_state_dict(v4.state_dict())
    assert resumed.books.counts == v4.books.counts and resumed.books.books == {}
    assert make_hooks("fixed", eb=0.05).codec_metrics() == {}
    with pytest.raises(ValueError, match="tolerance"):
        make_hooks("fixed", codec_version="v4", book_tol=float("nan"))


def test_an_arm_s_book_tolerance_reaches_its_books_and_a_bad_one_is_refused():
    from repro.papers.comet.arms import ArmParams

    assert ArmParams().book_tol == 0.05  # the arms' config (comet_uncompressed.yaml) sets the same default
    hooks = make_hooks("fixed", eb=0.1, codec_version="v4", book_tol=0.2)
    assert hooks.books.tol == 0.2
    with pytest.raises(ValueError, match="book tolerance"):
        make_hooks("fixed", eb=0.1, codec_version="v4", book_tol=-0.1)
