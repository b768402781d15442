"""The SimPy all-reduce model: a lone all-reduce is the alpha-beta ring formula, iteration times
bracket where they must, and the arms order sensibly on a synthetic timeline."""

from __future__ import annotations

import pytest

from repro.papers.caramel import links, model, plan
from repro.papers.caramel.links import LinkSpec
from timelines import synthetic

MIB = plan.MIB


@pytest.mark.parametrize("world,nbytes,gbps,alpha_us", [(2, 8 * MIB, 10.0, 25.0), (4, 100 * MIB, 100.0, 5.0),
                                                          (8, 1000, 25.0, 30.0)])
def test_a_lone_allreduce_takes_the_ring_formula(world, nbytes, gbps, alpha_us):
    link = LinkSpec("l", gbps=gbps, alpha_us=alpha_us)
    want = 2 * (world - 1) * (alpha_us * 1e-6 + nbytes / world / (gbps * 1e9 / 8))
    assert links.ring_allreduce_s(nbytes, world, link) == pytest.approx(want)
    # one message released as backward starts: the iteration is forward + the all-reduce (backward hides in it)
    tl = synthetic([nbytes], backward_s=1e-9, forward_s=1e-9)
    msgs = [plan.Message((0,), nbytes, 0.0, 0.0)]
    got = model.simulate(tl, msgs, world, link)["iteration_s"]
    assert got == pytest.approx(want + 1e-9, rel=1e-9)


def test_fit_inverts_the_formula():
    link = LinkSpec("l", gbps=3.0, alpha_us=40.0)
    sizes = [1e3, 1e5, 1e6, 1e7]
    fitted = links.fit(sizes, [links.ring_allreduce_s(n, 3, link) for n in sizes], 3)
    assert fitted.gbps == pytest.approx(3.0) and fitted.alpha_us == pytest.approx(40.0)


def _arms(tl, link, world=4):
    return {arm: model.run_arm(arm, tl, world, link, plan.CaramelParams())["iteration_s"] for arm in model.ARMS}


def test_no_arm_beats_compute_or_loses_to_no_overlap():
    tl = synthetic([MIB // 4] * 40 + [40 * MIB] * 3, backward_s=0.05, forward_s=0.03)
    for gbps in (1.0, 10.0, 100.0):
        t = _arms(tl, LinkSpec("l", gbps=gbps, alpha_us=25.0))
        for arm, v in t.items():
            assert v >= 0.08 - 1e-12, arm  # never faster than compute alone
            assert v <= t["no_overlap"] * (1 + 1e-9), arm  # overlap never hurts here
        assert t["ddp"] < t["no_overlap"]  # DDP overlaps backward


def test_transfer_boundaries_hide_communication_in_the_next_forward():
    # the first layer's big gradient is ready last and needed first; the rest can hide in forward
    sizes = [MIB] + [8 * MIB] * 10
    tl = synthetic(sizes, backward_s=0.02, forward_s=0.05)
    t = _arms(tl, LinkSpec("eth10", gbps=10.0, alpha_us=25.0))
    assert t["caramel"] < t["caramel_ddp"]


def test_fast_link_leaves_nothing_to_win():
    tl = synthetic([MIB] * 20, backward_s=0.05, forward_s=0.03)
    t = _arms(tl, LinkSpec("fast", gbps=1e5, alpha_us=0.1))
    assert t["horovod"] <= 0.08 + 0.005 + 1e-6  # Horovod waits at most one 5 ms cycle
    rest = [v for arm, v in t.items() if arm != "horovod"]
    assert max(rest) / min(rest) < 1.001


def test_iterations_must_give_a_steady_state():
    tl = synthetic([MIB])
    with pytest.raises(ValueError, match="iterations"):
        model.simulate(tl, plan.ddp(tl), 2, LinkSpec(), iterations=2)
