"""The Hydra runner: composition, validation, skip/NeedsGPU logic, records and tables."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from repro import records
from repro.experiment import NeedsGPU, cuda_available
from repro.pipeline.run import ConfigError, execute

from conftest import REPO


def _cfg(compose, tmp_path, entry="fake_experiments:echo", params=None, smoke=None, scale="smoke", gpus=0,
         device="cpu", inputs=None):
    cfg = compose(["experiment=ceilings/ceilings", f"scale={scale}", f"out={tmp_path}", f"device={device}"])
    OmegaConf.set_struct(cfg, False)
    cfg.experiment = {"name": entry.split(":")[1], "paper": "test", "entry": entry, "gpus": gpus,
                      "inputs": inputs or {}, "params": params or {}, "smoke": smoke or {}}
    return cfg


def test_smoke_overrides_apply_only_at_smoke(compose, tmp_path):
    rec = records.read(execute(_cfg(compose, tmp_path / "s", params={"value": 2.0}, smoke={"rows": 5})))
    assert rec["params"] == {"value": 2.0, "rows": 5}
    assert rec["metrics"]["value"] == 2.0 and rec["scale"] == "smoke"
    assert (tmp_path / "s" / "rows.csv").read_text().count("\n") == 6
    assert rec["provenance"]["config_hash"] and "torch" in rec["provenance"]["packages"]
    assert rec["seed"] == 0 and "src/repro/pipeline/run.py" not in rec["provenance"]["code"]  # its code, by digest
    assert all(len(d) == 16 for d in rec["provenance"]["code"].values())
    rec = records.read(execute(_cfg(compose, tmp_path / "p", params={"value": 2.0}, smoke={"rows": 5},
                                    scale="paper")))
    assert rec["params"]["rows"] == 3 and rec["scale"] == "paper"


def test_unknown_param_is_named(compose, tmp_path):
    with pytest.raises(ConfigError, match="valu.*valid keys for echo: value, rows"):
        execute(_cfg(compose, tmp_path, params={"valu": 2.0}))


def test_bad_value_type_is_named(compose, tmp_path):
    with pytest.raises(ConfigError, match="rows"):
        execute(_cfg(compose, tmp_path, params={"rows": "many"}))


def test_unknown_experiment_key(compose, tmp_path):
    cfg = _cfg(compose, tmp_path)
    cfg.experiment.colour = "red"
    with pytest.raises(ConfigError, match="colour"):
        execute(cfg)


def test_missing_input_is_named(compose, tmp_path):
    cfg = _cfg(compose, tmp_path, inputs={"ceilings": "ceilings/ceilings/record.json"})
    cfg.results = str(tmp_path / "results")
    with pytest.raises(ConfigError, match="experiment.inputs.ceilings: .*results/ceilings/ceilings/record.json"):
        execute(cfg)
    assert not (tmp_path / "record.json").exists()


def test_declared_inputs_resolve_below_the_results_root(compose, tmp_path):
    (tmp_path / "results" / "a").mkdir(parents=True)
    (tmp_path / "results" / "a" / "x.csv").write_text("1\n")
    cfg = _cfg(compose, tmp_path / "out", inputs={"x": "a/x.csv"})
    cfg.results = str(tmp_path / "results")
    rec = records.read(execute(cfg))
    assert rec["inputs"] == {"x": str(tmp_path / "results" / "a" / "x.csv")} and rec["gpus"] == 0


def test_bad_gpu_count_and_device_are_named(compose, tmp_path):
    with pytest.raises(ConfigError, match="experiment.gpus"):
        execute(_cfg(compose, tmp_path, gpus=-1))
    with pytest.raises(ConfigError, match="device: must be auto, cuda or cpu, got 'gpu'"):
        execute(_cfg(compose, tmp_path, gpus=1, device="gpu"))


@pytest.mark.skipif(cuda_available(), reason="tests the no-GPU path")
def test_gpu_only_step_without_gpu(compose, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu_only = dict(entry="fake_experiments:gpu_only", gpus=1, device="auto")
    rec = records.read(execute(_cfg(compose, tmp_path / "s", **gpu_only)))
    assert rec["status"] == "skipped" and rec["metrics"] == {}
    assert rec["reason"] == "skipped: needs 1 CUDA GPU and this machine has 0"
    with pytest.raises(NeedsGPU, match="needs 1 CUDA GPU and this machine has 0"):
        execute(_cfg(compose, tmp_path / "p", scale="paper", **gpu_only))


def test_a_step_needing_more_gpus_than_here_says_how_many(compose, tmp_path, monkeypatch):
    """With CPU paths at smoke scale it runs on the CPU; a GPU-only one is skipped naming the count;
    at paper scale both are refused naming it."""
    monkeypatch.setattr("repro.pipeline.gpu_slots.gpu_count", lambda: 1)  # a machine with one GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # given to this job, as a scheduler would
    rec = records.read(execute(_cfg(compose, tmp_path / "a", gpus=2, device="auto")))
    assert rec["status"] == "ok" and rec["device"] == "cpu" and rec["gpus"] == 0
    rec = records.read(execute(_cfg(compose, tmp_path / "b", entry="fake_experiments:gpu_only", gpus=2, device="auto")))
    assert rec["reason"] == "skipped: needs 2 CUDA GPUs and this machine has 1"
    with pytest.raises(NeedsGPU, match="needs 2 CUDA GPUs and this machine has 1"):
        execute(_cfg(compose, tmp_path / "c", gpus=2, device="auto", scale="paper"))


def test_failing_experiment_leaves_previous_record(compose, tmp_path):
    execute(_cfg(compose, tmp_path))
    before = (tmp_path / "record.json").read_text()
    broken = _cfg(compose, tmp_path, entry="fake_experiments:broken")
    broken.replace = True  # another experiment into the same folder, as the workflow may
    with pytest.raises(RuntimeError, match="on purpose"):
        execute(broken)
    assert (tmp_path / "record.json").read_text() == before


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "repro.pipeline.run", *args], capture_output=True, text=True, cwd=REPO)


def test_cli_runs_ceilings_at_smoke(tmp_path):
    proc = _cli("experiment=ceilings/ceilings", "scale=smoke", f"out={tmp_path}", "device=cpu")
    assert proc.returncode == 0, proc.stderr
    rec = records.read(tmp_path)
    assert rec["metrics"]["host_copy_GBps"] > 0 and rec["metrics"]["gemm_fp32_TFLOPs"] > 0
    assert (tmp_path / ".hydra" / "config.yaml").exists()


@pytest.mark.parametrize("override,needle", [
    ("nosuchkey=1", "Key 'nosuchkey' is not in struct"),
    ("experiment.params.repeats=abc", "experiment.params.repeats"),
    ("scale=huge", "scale: must be one of"),
])
def test_cli_bad_overrides_fail_with_key_named(tmp_path, override, needle):
    proc = _cli("experiment=ceilings/ceilings", f"out={tmp_path}", override)
    assert proc.returncode != 0
    assert needle in proc.stderr + proc.stdout
    assert not (tmp_path / "record.json").exists()


def test_cli_help_lists_experiments():
    proc = _cli("--help")
    assert proc.returncode == 0 and "ceilings/ceilings" in proc.stdout


def test_cli_replaces_a_declared_input_and_refuses_an_undeclared_one(tmp_path):
    """A declared input can be pointed elsewhere as experiment.inputs.<name>=<path>; a name the
    experiment file does not declare is refused."""
    first = tmp_path / "first"
    assert _cli("experiment=ceilings/ceilings", "scale=smoke", f"out={first}", "device=cpu").returncode == 0
    proc = _cli("experiment=tsm2x/tsm2_r", "scale=smoke", f"out={tmp_path / 'second'}", "device=cpu",
                f"experiment.inputs.ceilings={first / 'record.json'}")
    assert proc.returncode == 0, proc.stderr
    assert records.read(tmp_path / "second")["inputs"]["ceilings"] == str(first / "record.json")
    bad = _cli("experiment=tsm2x/tsm2_r", "scale=smoke", f"out={tmp_path / 'third'}", "experiment.inputs.ceiling=x")
    assert bad.returncode != 0 and "ceiling" in bad.stderr


def test_a_run_that_needs_no_torch_does_not_import_it(tmp_path):
    """A job's fixed cost: a SimPy experiment on a machine without a GPU driver never loads torch (the
    runner names the data and checkpoint errors only where their modules are loaded; the GPU
    description comes without torch there), and its record says the same as with torch loaded."""
    import os
    import subprocess
    import sys

    from repro import machine

    if any(os.path.exists(p) for p in machine.GPU_DRIVER_PATHS):
        pytest.skip("a GPU driver is here: provenance asks torch about the GPU")
    code = ("import runpy, sys, json\n"
            f"sys.argv = ['repro.pipeline.run', 'experiment=oovr/scenes', 'scale=smoke', 'out={tmp_path / 'run'}']\n"
            "try:\n    runpy.run_module('repro.pipeline.run', run_name='__main__')\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(json.dumps(sorted(m for m in ('torch', 'repro.data', 'repro.train') if m in sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    from repro import records

    prov = records.read(tmp_path / "run")["provenance"]
    assert not any(f.startswith(("src/repro/data/", "src/repro/train/")) for f in prov["code"])
    import torch  # noqa: F401  (the description with torch loaded is the same)

    machine.gpu_info.cache_clear()
    try:
        assert {k: prov[k] for k in ("gpu_count", "gpu_name", "cuda", "driver")} == \
            {k: machine.gpu_info().get(k) for k in ("gpu_count", "gpu_name", "cuda", "driver")}
    finally:
        machine.gpu_info.cache_clear()


def test_library_errors_are_reported_once_their_module_is_loaded():
    import sys

    from repro.pipeline import run

    assert run.ConfigError in run.reported_errors()
    from repro.data.arrays import DataError
    from repro.train.checkpoint import CheckpointMismatch

    assert DataError in run.reported_errors() and CheckpointMismatch in run.reported_errors()
    assert all(mod in sys.modules for mod, _ in run.LIBRARY_ERRORS)


def test_torch_cuda_version_is_read_without_importing_torch():
    import torch

    from repro import machine

    assert machine.torch_cuda_version() == torch.version.cuda


def test_a_killed_run_resumes_its_finished_stages(compose, tmp_path):
    """Context.stage: the stages a killed run finished are taken up by the rerun (and named in its
    record), a changed parameter makes them stale, and a finished run leaves none behind."""
    entry, kill = "fake_experiments:staged", tmp_path / "kill_after"
    kill.write_text("2")
    with pytest.raises(RuntimeError, match="killed after part 1"):
        execute(_cfg(compose, tmp_path, entry=entry))
    kill.unlink()
    assert sorted(p.name for p in (tmp_path / "stages").iterdir()) == ["part0.pkl", "part1.pkl"]
    rec = records.read(execute(_cfg(compose, tmp_path, entry=entry)))
    assert (tmp_path / "computed.txt").read_text().split() == ["0", "1", "2"]  # parts 0 and 1 not again
    assert rec["metrics"]["total"] == 3.0
    assert rec["tags"]["resumed"] == "stages from a killed run: part0, part1"
    assert not (tmp_path / "stages").exists()
    (tmp_path / "computed.txt").unlink()
    kill.write_text("2")
    other = _cfg(compose, tmp_path, entry=entry, params={"value": 2.0})
    other.replace = True
    with pytest.raises(RuntimeError):
        execute(other)
    kill.unlink()
    (tmp_path / "stages" / "part0.pkl").write_bytes(b"torn")  # unreadable: computed again, not trusted
    third = _cfg(compose, tmp_path, entry=entry, params={"value": 3.0})
    third.replace = True
    rec = records.read(execute(third))
    assert rec["metrics"]["total"] == 9.0 and "resumed" not in rec["tags"]
    assert (tmp_path / "computed.txt").read_text().split() == ["0", "1", "0", "1", "2"]  # stale and torn
