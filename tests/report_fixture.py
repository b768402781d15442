"""A small ledger, reference machine and run here for the report's tests, and a reader of the page's
elements (what a browser's DOM holds)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import yaml

from repro import records

EXPERIMENTS = {"k/fast": 1, "k/skipped": 1, "k/sim": 0, "k/smoke": 0, "k/nan": 0, "k/sweep": 0, "k/cpu": 0}
COMMON = dict(paper="P", statement="s", paper_value=2.0, unit="x")
CLAIMS = [
    {**COMMON, "id": "h.both", "target": 1.5, "direction": ">=", "timing": True,
     "metric": {"experiment": "k/fast", "key": "speedup"},
     "also": [{"experiment": "k/fast", "key": "min", "target": 1.0, "direction": ">="}],
     "ceiling": {"experiment": "k/fast", "key": "roof", "note": "a kernel at the copy roofline"},
     "note": "What is measured. Why it misses. A third sentence, behind the disclosure."},
    {**COMMON, "id": "h.ref", "target": 1.0, "direction": ">=", "metric": {"experiment": "k/skipped", "key": "speedup"}},
    {**COMMON, "id": "h.smoke", "paper": "Q", "target": 1.0, "direction": ">=",
     "metric": {"experiment": "k/smoke", "key": "speedup"}},
    {**COMMON, "id": "h.model", "paper": "Q", "target": 1.0, "direction": ">=", "kind": "model",
     "metric": {"experiment": "k/sim", "key": "speedup"}, "ceiling": {"none": "a model's result"}},
    {**COMMON, "id": "h.nan", "paper": "Q", "target": 0.5, "direction": "<=", "unit": "top-1 points lost",
     "metric": {"experiment": "k/nan", "key": "loss_at_target"}},
    {**COMMON, "id": "h.time", "paper": "Q", "target": 2.0, "direction": "<=", "unit": "s", "paper_unit": "ms on a K40",
     "metric": {"experiment": "k/sweep", "key": "seconds"}},
    {**COMMON, "id": "h.mixed", "paper": "Q", "target": 1.0, "direction": ">=",
     "metric": {"experiment": "k/skipped", "key": "speedup"},
     "also": [{"experiment": "k/cpu", "key": "err", "target": 1e-6, "direction": "<="}]},
    {**COMMON, "id": "h.pending", "target": 1.0, "direction": ">=", "needs": "gpu2"},
]


def write_record(root: Path, experiment: str, metrics: dict, scale="paper", status="ok", gpu="NVIDIA H200",
                 sharing=0, tags=None, duration=12.5, started="2026-12-01T10:00:00+00:00", commit="c0ffee1234") -> dict:
    paper, name = experiment.split("/", 1)
    prov = {"commit": commit, "dirty": False, "config_hash": "x", "hostname": "gpu-host" if gpu else "cpu-host",
            "python": "3.12.3", "packages": {"torch": "2.11.0", "numpy": "2.5.2"}, "cpu_model": "Xeon"}
    if gpu:
        prov.update(gpu_name=gpu, driver="580.159.04", cuda="13.0", gpu_sharing={"gpu_neighbours_max": sharing})
    rec = dict(experiment=name.split("/")[-1], paper=paper, scale=scale, status=status, params={}, metrics=metrics,
               provenance=prov, started=started, duration_s=duration, tags=tags or {},
               reason=None if status == "ok" else "skipped: needs 1 CUDA GPU and this machine has 0")
    records.write(root / experiment, rec)
    return records.read(root / experiment)


def figure(path: Path) -> Path:
    """A PNG (and its PDF) as repro.figures.save writes them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from repro.figures import save

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([0, 1, 2], [1, 3, 2])
    return save(fig, path)


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="1"
skipped="1" tests="4" time="12.5" timestamp="2026-12-02T18:00:00.000000" hostname="h">
<testcase classname="tests.test_claims" name="test_a" time="0.1"/>
<testcase classname="tests.tsm2x.test_tsm2" name="test_b" time="0.1"/>
<testcase classname="tests.tsm2x.test_tsm2" name="test_gpu" time="0.0"><skipped type="pytest.skip"
message="needs a CUDA GPU (run on the GPU machine)">skip</skipped></testcase>
<testcase classname="tests.comet.test_codec" name="test_c" time="0.1"><failure message="boom">x</failure></testcase>
</testsuite></testsuites>"""


def make(tmp_path: Path) -> dict:
    """The ledger, config, reference root and results folder of the report's tests."""
    config, ledger = tmp_path / "config", tmp_path / "claims.yaml"
    for exp, gpus in EXPERIMENTS.items():
        path = config / "experiment" / f"{exp}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        paper, name = exp.split("/")
        path.write_text(f"name: {name}\npaper: {paper}\ngpus: {gpus}\n")
    ledger.write_text(yaml.safe_dump({"claims": CLAIMS}))
    results, ref_root = tmp_path / "results", tmp_path / "reference"
    ref = ref_root / "nvidia-h200"
    write_record(ref, "k/fast", {"speedup": 1.4, "min": 1.1, "roof": 2.0}, sharing=3, started="2026-11-30T10:00:00+00:00")
    write_record(ref, "k/skipped", {"speedup": 1.7})
    write_record(ref, "k/sim", {"speedup": 0.9})
    write_record(ref, "k/nan", {"loss_at_target": float("nan")},
                 tags={"loss_at_target": "least loss among the points at the target (NaN: no point reaches it)"})
    write_record(ref, "k/sweep", {"seconds": 1.0}, started="2026-12-02T10:00:00+00:00")
    write_record(ref, "k/sweep/p1", {"seconds": 1.5}, duration=100.0)  # a sweep's point, nested in its folder
    figure(ref / "figures" / "k" / "skipped.png")
    here = {"fast": write_record(results, "k/fast", {"speedup": 2.0, "min": 1.2, "roof": 2.5}, sharing=0),
            "skipped": write_record(results, "k/skipped", {}, scale="smoke", status="skipped", gpu=None),
            "smoke": write_record(results, "k/smoke", {"speedup": 0.01}, scale="smoke", gpu=None),
            "cpu": write_record(results, "k/cpu", {"err": 1e-9}, gpu=None)}  # a CPU step at paper scale
    figure(results / "figures" / "k" / "fast.png")
    (results / "mlflow").mkdir(parents=True)
    (results / "mlflow" / "ingested.json").write_text(json.dumps(
        {"uri": "sqlite:///results/mlflow.db", "logged": [],
         "already": [here["fast"]["record_id"]],
         "runs": {here["fast"]["record_id"]: {"run_id": "abc123", "experiment_id": "7"}}}))
    (results / "tests").mkdir()
    (results / "tests" / "junit.xml").write_text(JUNIT)
    return dict(ledger=ledger, config=config, results=results, reference=ref_root, here=here)


class Elements(HTMLParser):
    """Every element of a page as (tag, attributes, text inside it up to the next element)."""

    def __init__(self, page: str):
        super().__init__()
        self.elements: list[tuple[str, dict, str]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs), ""))

    def handle_data(self, data):
        if self.elements:
            tag, attrs, text = self.elements[-1]
            self.elements[-1] = (tag, attrs, text + data)

    def find(self, tag: str | None = None, **attrs) -> list[tuple[str, dict, str]]:
        return [e for e in self.elements if (tag is None or e[0] == tag)
                and all(e[1].get(k.rstrip("_").replace("_", "-")) == v for k, v in attrs.items())]

    @property
    def text(self) -> str:
        return " ".join(t for _, _, t in self.elements)
