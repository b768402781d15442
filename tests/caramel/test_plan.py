"""Caramel's plan and the baselines' plans on synthetic timelines: order, bucket sizes, chunks."""

from __future__ import annotations

import pytest

from repro.papers.caramel import plan
from repro.papers.caramel.links import LinkSpec
from timelines import synthetic

MIB = plan.MIB
LINK = LinkSpec("eth10", gbps=10.0, alpha_us=25.0)


def _covered(messages, n):
    seen = {}
    for m in messages:
        for i in m.params:
            seen[i] = seen.get(i, 0) + m.nbytes
    return seen


def test_ready_order_follows_ready_time():
    tl = synthetic([4, 8, 12, 16])
    assert list(plan.ready_order(tl)["index"]) == [3, 2, 1, 0]


def test_ddp_buckets_a_small_first_then_25_mib_in_ready_order():
    tl = synthetic([10 * MIB] * 6)  # ready 5, 4, ..., 0
    msgs = plan.ddp(tl)
    assert [m.params for m in msgs] == [(5,), (4, 3, 2), (1, 0)]  # 1 MiB first cap; 25 MiB closes at 30
    assert msgs[0].release_s < msgs[1].release_s < msgs[2].release_s
    assert msgs[1].release_s == pytest.approx(tl.set_index("index").loc[2, "ready_s"])


def test_no_overlap_releases_everything_at_backward_end():
    tl = synthetic([MIB] * 4, backward_s=0.3)
    assert {m.release_s for m in plan.no_overlap(tl)} == {0.3}


def test_horovod_fuses_per_cycle_up_to_the_threshold():
    tl = synthetic([30 * MIB, 30 * MIB, 30 * MIB, MIB], backward_s=0.004)  # all ready within one 5 ms cycle
    msgs = plan.horovod(tl, fusion_mb=64.0, cycle_ms=5.0)
    assert [m.params for m in msgs] == [(3, 2, 1), (0,)]  # 1 + 30 + 30 <= 64, the next 30 does not fit
    assert all(m.release_s == pytest.approx(0.005) for m in msgs)


def test_caramel_batches_small_tensors_to_the_threshold_and_chunks_large_ones():
    target = plan.batch_bytes(4, LINK, 0.9)
    assert target == pytest.approx(4 * 1.25e9 * 25e-6 * 9)  # n = p B alpha e / (1 - e)
    small = int(target / 5)
    tl = synthetic([small] * 12 + [10 * MIB], backward_s=1e-6)  # all ready at once: no idle link to use
    msgs = plan.caramel(tl, 4, LINK, plan.CaramelParams(efficiency=0.9, chunk_mb=4.0))
    big = [m for m in msgs if m.params == (12,)]
    assert [m.nbytes for m in big] == [4 * MIB, 4 * MIB, 2 * MIB] and {m.chunks for m in big} == {3}
    batches = [m for m in msgs if m.params != (12,)]
    assert [len(m.params) for m in batches] == [5, 5, 2]  # closes once >= target; the rest at the end
    assert sum(m.nbytes for m in msgs) == int(tl["bytes"].sum())


def test_caramel_sends_at_once_when_the_link_would_idle():
    tl = synthetic([1024] * 4, backward_s=1.0)  # gradients 250 ms apart: waiting to batch wastes the link
    msgs = plan.caramel(tl, 4, LINK, plan.CaramelParams())
    assert [len(m.params) for m in msgs] == [1, 1, 1, 1]


def test_bucket_caps_reproduce_the_plan_under_ddps_assignment():
    tl = synthetic([3000, 200, 70000, 500, 9000, 40], backward_s=1e-6)
    link = LinkSpec("t", gbps=1.0, alpha_us=5.0)
    msgs = plan.caramel(tl, 2, link, plan.CaramelParams(chunk_mb=16384 / MIB))
    caps = [round(c * MIB) for c in plan.bucket_caps_mb(msgs)]
    rows = plan.ready_order(tl)
    groups = plan.buckets_by_size(list(rows["bytes"]), caps)
    want = []
    for m in msgs:
        if m.chunk == 0:
            want.append(m.params)
    assert [tuple(int(rows["index"][i]) for i in g) for g in groups] == want
