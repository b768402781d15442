"""The Hydra runner: composition, validation, skip/NeedsGPU logic, records and tables."""

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from repro import records
from repro.experiment import NeedsGPU, cuda_available
from repro.run import ConfigError, execute

from conftest import REPO


def _cfg(compose, tmp_path, entry="fake_experiments:echo", params=None, smoke=None, scale="smoke"):
    cfg = compose(["experiment=ceilings/ceilings", f"scale={scale}", f"out={tmp_path}", "device=cpu"])
    OmegaConf.set_struct(cfg, False)
    cfg.experiment = {"name": entry.split(":")[1], "paper": "test", "entry": entry,
                      "params": params or {}, "smoke": smoke or {}}
    return cfg


def test_smoke_overrides_apply_only_at_smoke(compose, tmp_path):
    rec = records.read(execute(_cfg(compose, tmp_path / "s", params={"value": 2.0}, smoke={"rows": 5})))
    assert rec["params"] == {"value": 2.0, "rows": 5}
    assert rec["metrics"]["value"] == 2.0 and rec["scale"] == "smoke"
    assert (tmp_path / "s" / "rows.csv").read_text().count("\n") == 6
    assert rec["provenance"]["config_hash"] and "torch" in rec["provenance"]["packages"]
    assert rec["seed"] == 0 and "src/repro/run.py" not in rec["provenance"]["code"]  # its code, by digest
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
    cfg = _cfg(compose, tmp_path)
    cfg.inputs = {"ceilings": str(tmp_path / "nope.json")}
    with pytest.raises(ConfigError, match="inputs.ceilings"):
        execute(cfg)


@pytest.mark.skipif(cuda_available(), reason="tests the no-GPU path")
def test_gpu_only_step_without_gpu(compose, tmp_path):
    rec = records.read(execute(_cfg(compose, tmp_path / "s", entry="fake_experiments:gpu_only")))
    assert rec["status"] == "skipped" and "needs a CUDA GPU" in rec["reason"] and rec["metrics"] == {}
    with pytest.raises(NeedsGPU, match="needs a CUDA GPU"):
        execute(_cfg(compose, tmp_path / "p", entry="fake_experiments:gpu_only", scale="paper"))


def test_failing_experiment_leaves_previous_record(compose, tmp_path):
    execute(_cfg(compose, tmp_path))
    before = (tmp_path / "record.json").read_text()
    with pytest.raises(RuntimeError, match="on purpose"):
        execute(_cfg(compose, tmp_path, entry="fake_experiments:broken"))
    assert (tmp_path / "record.json").read_text() == before


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "repro.run", *args], capture_output=True, text=True, cwd=REPO)


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


def test_cli_named_inputs_as_the_rules_pass_them(tmp_path):
    """The Snakemake rules pass inputs as 'inputs.<name>=<path>' (see workflow/rules/common.smk)."""
    first = tmp_path / "first"
    assert _cli("experiment=ceilings/ceilings", "scale=smoke", f"out={first}").returncode == 0
    proc = _cli("experiment=ceilings/ceilings", "scale=smoke", f"out={tmp_path / 'second'}",
                f"inputs.ceilings={first / 'record.json'}")
    assert proc.returncode == 0, proc.stderr
    assert records.read(tmp_path / "second")["inputs"] == {"ceilings": str(first / "record.json")}
    bad = _cli("experiment=ceilings/ceilings", "scale=smoke", f"out={tmp_path / 'third'}", "inputs.ceiling=x")
    assert bad.returncode != 0 and "ceiling" in bad.stderr
