"""The arena path on the CPU: the buffer layout (aligned, disjoint, fully accounted), payload
budgets, and the planner's control logic (calibration, planned steps, overflow voiding the
gradients, re-planning, off-plan steps, the capture guard), with the kernels replaced by fakes
that write the words the real kernels write on the device (the GPU tests run the real ones)."""

from __future__ import annotations

import ctypes

import pytest
import torch

from repro.papers.comet import arena, buffers, codec, gpu_codec
from repro.papers.comet.hooks import CometHooks, EBController, make_hooks
from repro.train.hooks import fast_mode_conflict


@pytest.mark.parametrize("counts", [(1,), (4096, 5000, 1024 * 9 + 3), tuple(range(1000, 60_000, 7919))])
def test_layout_regions_are_aligned_disjoint_and_accounted(counts):
    budgets = tuple(32 * (i + 1) for i in range(len(counts)))
    lay = buffers.layout(counts, budgets)
    regions = [(lay.bases, 8 * (len(counts) + 1)), (lay.flags, 8), (lay.counters, 4 * len(counts))]
    for i, n in enumerate(counts):
        nb, nt = codec.nblocks(n), buffers.ntiles(codec.nblocks(n))
        regions += [(lay.status[i], 8 * nt), (lay.starts[i], 8 * nt), (lay.anchors[i], 4 * nb), (lay.widths[i], nb)]
        assert lay.status[i] % 8 == 0 and lay.starts[i] % 8 == 0 and lay.anchors[i] % 4 == 0
        assert lay.status[i] + 8 * nt <= lay.scratch_bytes <= lay.starts[i]
        assert lay.widths[i] + nb <= lay.payload
    regions.append((lay.payload, 4 * lay.capacity))
    regions.sort()
    for (a, la), (b, _) in zip(regions, regions[1:]):
        assert a + la <= b, (a, la, b)
    assert lay.payload % buffers.PAYLOAD_ALIGN == 0 and lay.scratch_bytes % 16 == 0
    assert lay.payload + 4 * lay.capacity == lay.total_bytes and lay.capacity == sum(budgets)
    shares = lay.slot_bytes()
    assert sum(shares) == lay.total_bytes and all(s >= 4 * b for s, b in zip(shares, budgets))


def test_budgets_round_up_to_whole_blocks():
    assert arena.budgets([0, 1, 100, 3200], 1.1) == (0, 32, 128, 3520)
    assert arena.budgets([64], 1.0) == (64,)


def test_bad_layouts_and_margins_are_refused():
    with pytest.raises(ValueError, match="one budget"):
        buffers.layout((10, 20), (32,))
    with pytest.raises(ValueError, match="one budget"):
        buffers.layout((0,), (0,))
    for margin in (0.9, 100, "big"):
        with pytest.raises(ValueError, match="arena margin"):
            arena.Planner(margin)


class FakeKernels:
    """compress_source: an exact stream of ``words[n]`` payload words; launch_compress: writes the
    slot's payload end, the largest payload (max_words) and, when ``overflow`` is set, the flag."""

    def __init__(self, monkeypatch, words: dict[int, int]):
        self.words, self.overflow, self.launches, self.exact = words, False, [], []
        monkeypatch.setattr(gpu_codec, "compress_source", self.compress_source)
        monkeypatch.setattr(gpu_codec, "launch_compress", self.launch_compress)

    def compress_source(self, src, eb, kernels_dir=None):
        self.exact.append(src.n)
        nb = codec.nblocks(src.n)
        return codec.Compressed(src.n, eb, torch.zeros(nb, dtype=torch.uint8), torch.zeros(nb, dtype=torch.int32),
                                torch.zeros(self.words[src.n], dtype=torch.int32))

    def launch_compress(self, src, eb, slot, max_words=0, kernels_dir=None):
        self.launches.append(slot)
        start = ctypes.c_int64.from_address(slot.bases).value
        ctypes.c_int64.from_address(slot.bases + 8).value = start + self.words[src.n]
        seen = ctypes.c_int64.from_address(max_words)
        seen.value = max(seen.value, self.words[src.n])
        if self.overflow:
            ctypes.c_int32.from_address(slot.flags).value = 1


def _source(n: int) -> gpu_codec.Source:
    return gpu_codec.Source(torch.zeros(n), n)


def _model_with_grads() -> torch.nn.Module:
    model = torch.nn.Linear(3, 2)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    return model


def _step(planner, counts, model=None):
    planner.begin_step()
    out = [planner.encode(_source(n), 0.05) for n in counts]
    planner.end_step(model or _model_with_grads())
    return out


def test_planner_calibrates_plans_voids_overflowing_steps_and_replans(monkeypatch):
    counts = (4096, 8192, 5000)
    fake = FakeKernels(monkeypatch, {4096: 96, 8192: 320, 5000: 0})
    planner = arena.Planner(margin=1.25)
    first = _step(planner, counts)  # no plan: every slot exact
    assert fake.exact == list(counts) and not fake.launches
    assert [stored for _, stored in first] == [c.nbytes for c, _ in first]
    plan = planner.plan
    assert plan.layout.counts == counts and plan.layout.budgets == (128, 416, 0) and planner.version == 0

    model = _model_with_grads()
    planned = _step(planner, counts, model)  # planned: one launch per slot into one arena, no exact stream
    assert len(fake.launches) == 3 and len(fake.exact) == 3
    slots = [s for s, _ in planned]
    assert {s.owner.data_ptr() for s in slots} == {slots[0].owner.data_ptr()}
    assert all(s.capacity == plan.layout.capacity for s in slots)
    assert sum(stored for _, stored in planned) == plan.layout.total_bytes  # the whole arena is counted
    assert plan.counters.tolist() == [0, 0, 1] and plan.max_words.tolist() == [96, 320, 0]
    assert all(bool((p.grad == 1).all()) for p in model.parameters())

    fake.overflow = True
    _step(planner, counts, model)
    assert plan.counters.tolist() == [1, 0, 2]
    assert all(bool((p.grad == 0).all()) for p in model.parameters())  # the overflowing step's gradients voided

    row = planner.replan()
    assert row["codec_overflow_steps"] == 1 and row["codec_planned_steps"] == 2
    assert row["codec_reserved_bytes"] == plan.layout.total_bytes
    assert planner.plan is not plan and planner.version == 1 and row["codec_plan_version"] == 1

    fake.overflow = False
    _step(planner, counts)
    again = planner.plan
    assert planner.replan()["codec_overflow_steps"] == 0
    assert planner.plan is again and again.counters.tolist() == [0, 0, 0]  # need within the margin: kept
    fake.words.update({4096: 32, 8192: 32})
    _step(planner, counts)
    planner.replan()  # budgets now exceed the need by more than the margin: re-planned smaller
    assert planner.plan.layout.capacity < again.layout.capacity and planner.version == 2
    totals = planner.metrics()
    assert totals["codec_overflow_steps"] == 1 and totals["codec_planned_steps"] == 4


def test_planner_drops_a_plan_the_step_leaves_and_recalibrates(monkeypatch):
    fake = FakeKernels(monkeypatch, {4096: 64, 8192: 64, 9000: 64})
    planner = arena.Planner()
    _step(planner, (4096, 8192))
    _step(planner, (4096, 9000))  # slot 1 differs from the plan: exact from there on
    assert len(fake.launches) == 1 and fake.exact == [4096, 8192, 9000]
    assert planner.plan is None and planner.version == 1
    _step(planner, (4096, 9000))  # a calibration step: a new plan, no second version bump
    assert planner.plan.layout.counts == (4096, 9000) and planner.version == 1


def test_planner_refuses_an_unplanned_tensor_during_capture(monkeypatch):
    FakeKernels(monkeypatch, {4096: 64})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    planner = arena.Planner()
    planner.begin_step()
    with pytest.raises(RuntimeError, match="not in the step's payload plan .there is no plan yet"):
        planner.encode(_source(4096), 0.05)


def test_comet_hooks_payload_modes():
    fixed = make_hooks("fixed", payload="arena")
    assert fixed.graph_safe and fixed.step_key() == ("arena", 0)
    assert fast_mode_conflict(fixed, compile=False, cuda_graph=True) is None
    adaptive = make_hooks("adaptive", payload="arena")
    assert not adaptive.graph_safe and "graph_safe" in fast_mode_conflict(adaptive, False, True)
    exact = make_hooks("fixed")
    assert not exact.graph_safe and exact.step_key() is None and exact.codec_metrics() == {}
    assert exact.on_epoch_end(torch.nn.Linear(1, 1), 0, {}) is None
    with pytest.raises(ValueError, match="payload must be one of"):
        CometHooks(EBController(0.05, adaptive=False), payload="ring")


def test_arena_totals_are_checkpointed():
    hooks = make_hooks("fixed", payload="arena")
    hooks.planner.totals["overflow_steps"] = 3
    resumed = make_hooks("fixed", payload="arena")
    resumed.load_state_dict(hooks.state_dict())
    assert resumed.planner.totals["overflow_steps"] == 3 and resumed.planner.plan is None
