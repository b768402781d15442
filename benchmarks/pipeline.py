"""`make bench-pipeline`: how fast the pipeline itself is, on this machine, in one run (issue 31).

Prints side by side, and writes as a record (``results/benchmarks/pipeline_<mode>.json``: the
record fields of repro.records, with provenance.collect()'s provenance), so the numbers are tracked:

- ``snakemake_start_s``: ``snakemake --version`` (Python, Snakemake and its plugins loading). The
  SLURM executor plugin runs ``scontrol show config`` while it loads; on a machine where SLURM is
  configured but its controller is down that waits ~9 s, so ``slurm_probe_s`` times that call alone.
- ``dag_build_s``: ``snakemake -n --config scale=smoke`` (start-up, parsing the rules, the DAG);
- ``noop_rerun_s``: ``snakemake --cores all --config scale=smoke`` when everything is up to date
  (median of 3; absent when the DAG is not up to date);
- ``job_fixed_s``: the start-up of a job that does nothing: the bare interpreter, and the runner's
  and the figure drawer's entry points with ``--help`` (they import what every such job imports),
  each also through the warm runner (``*_warm_s``: repro.pipeline.warm, its server started first);
  the runner's ``--help`` composes Hydra's whole help, more than a job does, so ``small`` is a real
  job beside them: the smallest experiment (``SMALL_JOB``: a model whose compute takes milliseconds)
  run into a folder of its own, cold and warm;
- ``clean_dag_s`` (full mode only): the smoke DAG from clean results (`make clean-results` first:
  the kernel build cache and the import cache under .cache/ are kept, as `make clean-results` keeps
  them), and per rule its job count and summed job seconds (from Snakemake's metadata);
- the load average (1 min) beside each timing: the machine may be shared;
- ``calibration_s``: a fixed single-core Python workload (CALIBRATION, median of 5) before and after
  (``calibration_after_s``): lent machines of one kind run it 20-30% apart from hour to hour, so two
  records are compared by their ratios to it, not by seconds alone;
- ``params.slurm_plugin``: whether the SLURM executor plugin is installed (Snakemake imports it at
  every start: `make slurm-plugin`; `make setup` leaves it out);
- ``make_test_s`` (``--tests``): the README's test command, `make test`, alone on the machine after
  the rest, with its outcome (``tests_passed``, ``_failed``, ``_skipped``) and, from its JUnit file,
  the summed test seconds per test folder (``test_s.<folder>``; a session fixture's set-up, such as
  the smoke DAG's, counts in the first test that uses it) and the longest single tests (tags); a
  passing run's seconds per test file are written to tests/durations.json (commit it: `make test`
  hands the longest files to its workers first, so no long file starts last while the other waits).

  python benchmarks/pipeline.py            full: clean smoke DAG, then the rest (removes results/ but reference/)
  python benchmarks/pipeline.py --quick    without the clean DAG (CI); counts per rule from a dry run
  python benchmarks/pipeline.py --tests    also `make test` (its target: <= 600 s on 2 cores)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from repro import records
from repro.pipeline import provenance  # noqa: E402

SMOKE = ["--config", "scale=smoke"]


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def timed(cmd: list[str], repeats: int = 1, check: bool = True, timeout: float | None = None,
          env: dict | None = None) -> dict:
    """Run ``cmd`` in the repository ``repeats`` times: {"s": median wall seconds, "runs": [...],
    "load": load average before the first run, "out": the last run's stdout + stderr, "rc": its exit code}."""
    runs, load, out, rc = [], _load(), "", 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
        runs.append(round(time.perf_counter() - t0, 3))
        out, rc = proc.stdout + proc.stderr, proc.returncode
        if check and proc.returncode != 0:
            raise SystemExit(f"pipeline bench: {' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    return {"s": round(statistics.median(runs), 3), "runs": runs, "load": load, "out": out, "rc": rc}


def job_counts(dry_run_output: str) -> dict[str, int]:
    """The per-rule job counts of Snakemake's "Job stats" table (a dry run prints it)."""
    counts, table = {}, dry_run_output.partition("Job stats:")[2]
    for line in table.splitlines()[3:]:
        m = re.fullmatch(r"\s*(\S+)\s+(\d+)\s*", line)
        if not m:
            break
        if m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


def job_seconds(since: float, metadata: Path = ROOT / ".snakemake" / "metadata") -> dict[str, dict]:
    """Per rule, the jobs that ended after ``since`` (epoch seconds) and their summed wall seconds,
    from Snakemake's per-output metadata (one job with several outputs counts once)."""
    jobs = {}
    for path in metadata.glob("*"):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        start, end = meta.get("starttime"), meta.get("endtime")
        if not meta.get("rule") or start is None or end is None or end < since:
            continue
        key = (meta["rule"], meta.get("shellcmd") or meta.get("job_hash"))  # one job: one command
        jobs[key] = max(jobs.get(key, 0.0), end - start)
    per_rule: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "job_s": 0.0})
    for (rule, _), seconds in jobs.items():
        per_rule[rule]["jobs"] += 1
        per_rule[rule]["job_s"] = round(per_rule[rule]["job_s"] + seconds, 2)
    return dict(sorted(per_rule.items()))


def clean_results() -> None:
    """`make clean-results`: everything under results/ but reference/."""
    for p in (ROOT / "results").iterdir():
        if p.name != "reference":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


SMALL_JOB = ["repro.pipeline.run", "experiment=aida/model", "scale=smoke", "device=cpu", "replace=true"]


CALIBRATION = [sys.executable, "-c", "sum(i * i % 7 for i in range(10_000_000))"]


def junit_summary(path: Path, longest: int = 10) -> dict:
    """From a pytest JUnit file: passed / failed / skipped counts, summed seconds per test folder
    (the test's module path up to its file: tests.real, tests, tests.comet, ...) and the ``longest``
    single tests as (seconds, node id)."""
    import xml.etree.ElementTree as ET

    counts = {"passed": 0, "failed": 0, "skipped": 0}
    folders: dict[str, float] = defaultdict(float)
    cases = []
    for tc in ET.parse(path).getroot().iter("testcase"):
        t = float(tc.get("time") or 0.0)
        module = tc.get("classname", "")
        folders[module.rsplit(".", 1)[0] if "." in module else module] += t
        cases.append((t, f"{module}::{tc.get('name')}"))
        if tc.find("skipped") is not None:
            counts["skipped"] += 1
        elif tc.find("failure") is not None or tc.find("error") is not None:
            counts["failed"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "folders": dict(sorted(folders.items(), key=lambda kv: -kv[1])),
            "longest": sorted(cases, reverse=True)[:longest]}


DURATIONS = ROOT / "tests" / "durations.json"


def file_durations(path: Path) -> dict[str, float]:
    """From a pytest JUnit file: the summed seconds of each test file's tests ({"tests/x/test_y.py": s}),
    a session fixture's set-up counted in the first test that uses it (the smoke DAG in its file's)."""
    import xml.etree.ElementTree as ET

    out: dict[str, float] = defaultdict(float)
    for tc in ET.parse(path).getroot().iter("testcase"):
        parts = (tc.get("classname") or "").split(".")  # tests.x.test_y[.TestClass]
        for i in range(len(parts), 0, -1):
            rel = "/".join(parts[:i]) + ".py"
            if (ROOT / rel).is_file():
                out[rel] += float(tc.get("time") or 0.0)
                break
    return {k: round(v, 1) for k, v in sorted(out.items())}


def measure_tests() -> dict:
    """`make test` in this checkout, timed, and its JUnit summary (results/tests/junit.xml); its per-file
    seconds refresh tests/durations.json, the order in which `make test` hands files to its workers
    (longest first: tests/conftest.py)."""
    run = timed(["make", "-s", "test"], check=False, timeout=7200)
    junit = ROOT / "results" / "tests" / "junit.xml"
    if junit.exists() and run["rc"] == 0:
        DURATIONS.write_text(json.dumps(file_durations(junit), indent=0) + "\n")
    return {"s": run["s"], "load": run["load"], "runs": run["runs"], "rc": run["rc"],
            **(junit_summary(junit) if junit.exists() else {})}


def measure(quick: bool, cores: str) -> dict:
    import importlib.util

    m: dict = {"mode": "quick" if quick else "full", "cores": cores, "cpu_count": os.cpu_count(),
               "slurm_plugin": importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None}
    m["calibration"] = timed(CALIBRATION, repeats=5)
    snakemake = [shutil.which("snakemake") or str(Path(sys.executable).parent / "snakemake")]
    py = [sys.executable]
    if not quick:
        clean_results()
        started = time.time()
        run = timed(snakemake + ["--cores", cores] + SMOKE, timeout=3600)
        m["clean_dag"] = {"s": run["s"], "load": run["load"], "load_after": _load()}
        m["per_rule"] = job_seconds(started)
    m["snakemake_start"] = timed(snakemake + ["--version"], repeats=3)
    if shutil.which("scontrol") and m["slurm_plugin"]:
        m["slurm_probe"] = timed(["scontrol", "show", "config"], check=False, timeout=30)
    dry = timed(snakemake + ["-n"] + SMOKE, repeats=3)
    m["dag_build"] = dry
    counts = job_counts(dry["out"])
    m["jobs_to_run"] = sum(counts.values())
    if quick:
        full = timed(snakemake + ["-n", "--forceall"] + SMOKE)
        m["per_rule"] = {rule: {"jobs": n} for rule, n in job_counts(full["out"]).items()}
    if m["jobs_to_run"] == 0:
        m["noop_rerun"] = timed(snakemake + ["--cores", cores] + SMOKE, repeats=3)
    small_out = f"out={tempfile.mkdtemp(prefix='bench-small-')}"
    m["job_fixed"] = {
        "python": timed(py + ["-c", "pass"], repeats=3),
        "repro.pipeline.run": timed(py + ["-m", "repro.pipeline.run", "--help"], repeats=3),
        "repro.figures": timed(py + ["-m", "repro.figures", "--help"], repeats=3),
        "small": timed(py + ["-m", *SMALL_JOB, small_out], repeats=3),
    }
    m["job_fixed"].update(warm_fixed(py, small_out))
    shutil.rmtree(small_out.partition("=")[2], ignore_errors=True)
    m["calibration_after"] = timed(CALIBRATION, repeats=5)
    return m


def warm_fixed(py: list[str], small_out: str, modules=("repro.pipeline.run", "repro.figures")) -> dict:
    """The same ``--help`` jobs and the small job through the warm runner (repro.pipeline.warm), its
    servers started first (in a folder of their own, stopped after): "<module>.warm" and "small.warm"
    -> timed()."""
    env = dict(os.environ, REPRO_WARM_DIR=tempfile.mkdtemp(prefix="rw-bench-"))
    for var in ("REPRO_WARM", "REPRO_WARM_DEBUG"):
        env.pop(var, None)
    warm = py + ["-m", "repro.pipeline.warm"]
    try:
        for module in modules:  # the first call runs cold and starts the module's server
            subprocess.run(warm + [module, "--help"], cwd=ROOT, env=env, capture_output=True, timeout=120)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = subprocess.run(warm + ["--status"], cwd=ROOT, env=env, capture_output=True, text=True).stdout
            if f"{len(modules)} warm server(s)" in status:
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"pipeline bench: the warm servers did not come up:\n{status}")
        fixed = {f"{module}.warm": timed(warm + [module, "--help"], repeats=3, env=env) for module in modules}
        fixed["small.warm"] = timed(warm + [*SMALL_JOB, small_out], repeats=3, env=env)
        return fixed
    finally:
        subprocess.run(warm + ["--stop"], cwd=ROOT, env=env, capture_output=True, timeout=60)
        time.sleep(0.5)
        shutil.rmtree(env["REPRO_WARM_DIR"], ignore_errors=True)


def as_record(m: dict) -> dict:
    """The record: metrics are the seconds (and job counts), params the mode; provenance as every run's."""
    metrics = {"dag_build_s": m["dag_build"]["s"], "snakemake_start_s": m["snakemake_start"]["s"],
               "jobs_to_run": m["jobs_to_run"]}
    tags = {}
    if "make_test" in m:
        t = m["make_test"]
        metrics["make_test_s"] = t["s"]
        metrics.update({f"tests_{k}": t[k] for k in ("passed", "failed", "skipped") if k in t})
        metrics.update({f"test_s.{folder}": round(sec, 1) for folder, sec in t.get("folders", {}).items()})
        tags["make_test_longest"] = json.dumps([[round(sec, 1), node] for sec, node in t.get("longest", [])])
    for key in ("slurm_probe", "noop_rerun", "calibration", "calibration_after"):
        if key in m:
            metrics[f"{key}_s"] = m[key]["s"]
    if "clean_dag" in m:
        metrics["clean_dag_s"] = m["clean_dag"]["s"]
    for name, t in m["job_fixed"].items():
        metrics[f"job_fixed_{name.replace('.', '_')}_s"] = t["s"]
    for rule, r in m["per_rule"].items():
        metrics[f"jobs.{rule}"] = r["jobs"]
        if "job_s" in r:
            metrics[f"job_s.{rule}"] = r["job_s"]
    loads = {k: v["load"] for k, v in m.items() if isinstance(v, dict) and "load" in v}
    loads.update({f"job_fixed.{k}": v["load"] for k, v in m["job_fixed"].items()})
    return {"experiment": f"pipeline_{m['mode']}", "paper": "benchmarks", "scale": "smoke", "status": "ok",
            "params": {"mode": m["mode"], "cores": m["cores"], "cpu_count": m["cpu_count"],
                       "slurm_plugin": m["slurm_plugin"]},
            "metrics": metrics, "tags": {"load_average_1min": json.dumps(loads, sort_keys=True), **tags},
            "timings": {k: v["runs"] for k, v in m.items() if isinstance(v, dict) and "runs" in v},
            "provenance": provenance.collect(), "started": m["started"]}


def report(m: dict) -> str:
    def row(name, t, note=""):
        return f"  {name:<34} {t['s']:>8.2f} s   load {t['load']:<5} {note}"

    lines = [f"pipeline bench ({m['mode']}, --cores {m['cores']}, {m['cpu_count']} CPUs, SLURM plugin "
             f"{'installed' if m['slurm_plugin'] else 'not installed'}):"]
    lines.append(row("machine calibration (before)", m["calibration"], "(a fixed Python workload: machine speed)"))
    if "clean_dag" in m:
        lines.append(row("clean smoke DAG", m["clean_dag"], "(target <= 300 s)"))
    lines.append(row("no-op rerun (median of 3)", m["noop_rerun"], "(target <= 2 s)") if "noop_rerun" in m
                 else f"  no-op rerun: not measured, the DAG is not up to date ({m['jobs_to_run']} jobs to run)")
    lines.append(row("DAG build (snakemake -n)", m["dag_build"]))
    lines.append(row("snakemake start-up (--version)", m["snakemake_start"]))
    if "slurm_probe" in m:
        lines.append(row("of which SLURM probe (scontrol)", m["slurm_probe"], "(the SLURM plugin's, at import)"))
    for name, t in m["job_fixed"].items():
        lines.append(row(f"job fixed cost: {name}", t))
    lines.append(row("machine calibration (after)", m["calibration_after"]))
    if "make_test" in m:
        t = m["make_test"]
        lines.append(row("make test", t, f"(target <= 600 s; {t.get('passed', '?')} passed, {t.get('failed', '?')} "
                                         f"failed, {t.get('skipped', '?')} skipped)"))
        for folder, sec in list(t.get("folders", {}).items())[:12]:
            lines.append(f"    {folder:<30} {sec:>9.1f} s of test time")
    lines.append("  per rule: jobs" + ("  summed job s" if "clean_dag" in m else ""))
    for rule, r in sorted(m["per_rule"].items(), key=lambda kv: -kv[1].get("job_s", kv[1]["jobs"])):
        lines.append(f"    {rule:<18} {r['jobs']:>4}" + (f"  {r['job_s']:>9.1f}" if "job_s" in r else ""))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="leave out the clean smoke DAG (it removes results/)")
    ap.add_argument("--cores", default="all", help="snakemake --cores for the clean DAG and the no-op rerun")
    ap.add_argument("--tests", action="store_true", help="also time `make test` (minutes: the whole suite)")
    ap.add_argument("--out", type=Path, help="the record (default results/benchmarks/pipeline_<mode>.json)")
    args = ap.parse_args(argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    m = measure(args.quick, args.cores)
    if args.tests:
        m["make_test"] = measure_tests()
    m["started"] = started
    print(report(m))
    record = as_record(m)
    records.validate(record, where="pipeline bench")
    out = args.out or ROOT / "results" / "benchmarks" / f"pipeline_{m['mode']}.json"
    records.atomic_write_text(out, json.dumps(record, indent=2, sort_keys=True) + "\n")
    print(f"record: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
