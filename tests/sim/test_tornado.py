"""The tornado data (repro.sim.sensitivity.tornado): each assumed parameter at its range's ends, rows
sorted by swing, the range the report shows, and the spans' checks; the chart's two lines."""

import pytest

from repro.sim import figures as sim_figures
from repro.sim import sensitivity
from repro.sim.params import ParamError
from repro.sim.sensitivity import Span

DEFAULTS = {"a": 1.0, "b": 10.0, "c": 4.0}


def headline(overrides: dict) -> dict:
    """speedup = 2 + 0.1 (a - 1) - 0.02 (b - 10) - 0.5 (c - 4)^2: c bends (both ends below the baseline)."""
    v = {**DEFAULTS, **overrides}
    return {"speedup": 2 + 0.1 * (v["a"] - 1) - 0.02 * (v["b"] - 10) - 0.5 * (v["c"] - 4) ** 2, "_events": 3.0}


SPANS = {"a": Span(0.5, 3.0, "why a"), "b": Span(5.0, 40.0, "why b"), "c": Span(3.0, 5.0, "why c")}


def test_tornado_evaluates_each_end_one_at_a_time_and_sorts_by_swing():
    table, base, events = sensitivity.tornado(headline, DEFAULTS, SPANS, "speedup")
    assert base == pytest.approx(2.0) and events == 3.0 * 7  # baseline + 2 ends x 3 parameters
    assert list(table["key"]) == ["b", "c", "a"]  # swings 0.7, 0.5, 0.25
    b, c, a = (table.set_index("key").loc[k] for k in "bca")
    assert (b.value_low, b.value_high) == pytest.approx((2.1, 1.4))
    assert (a.value_low, a.value_high) == pytest.approx((1.95, 2.2))
    assert (c.value_low, c.value_high, c.swing) == pytest.approx((1.5, 1.5, 0.5))  # the baseline counts in a swing
    assert b.why == "why b" and (b.low, b.high, b.default) == (5.0, 40.0, 10.0)
    metrics, tags = sensitivity.tornado_summary(table, base)
    assert (metrics["assumed_min"], metrics["assumed_max"]) == pytest.approx((1.4, 2.2))
    assert metrics["assumed_base"] == pytest.approx(2.0) and metrics["assumed_parameters"] == 3
    assert tags["assumed_largest"] == "b" and metrics["assumed_largest_swing"] == pytest.approx(0.7)


def test_order_by_swing_breaks_ties_by_key():
    table, _, _ = sensitivity.tornado(lambda o: {"speedup": 1.0}, DEFAULTS, SPANS, "speedup")
    assert list(table["key"]) == ["a", "b", "c"] and (table["swing"] == 0).all()


@pytest.mark.parametrize("spans,problem", [
    ({k: v for k, v in SPANS.items() if k != "c"}, "no range for the assumed parameter.s. c"),
    ({**SPANS, "d": Span(1, 2, "x")}, "d: not an assumed parameter"),
    ({**SPANS, "a": Span(2.0, 3.0, "x")}, r"spans.a: need 0 < low <= default \(1\) <= high"),
    ({**SPANS, "b": Span(0.0, 40.0, "x")}, "spans.b: need 0 < low"),
    ({**SPANS, "c": Span(3.0, 5.0, " ")}, "spans.c.why: say why"),
])
def test_a_span_that_is_missing_unknown_off_its_default_or_unexplained_is_named(spans, problem):
    with pytest.raises(ParamError, match=problem):
        sensitivity.tornado(headline, DEFAULTS, spans, "speedup")


def test_the_chart_marks_the_baseline_and_the_target_largest_swing_on_top():
    table, _, _ = sensitivity.tornado(headline, DEFAULTS, SPANS, "speedup")
    fig = sim_figures.tornado(table, 2.5, "speedup (x)", "toy")
    ax = fig.axes[0]
    lines = {round(line.get_xdata()[0], 6) for line in ax.get_lines()}
    assert lines == {2.0, 2.5}
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[-1].startswith("b ") and labels[0].startswith("a ")  # barh draws bottom-up
