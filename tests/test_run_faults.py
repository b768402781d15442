"""Bad input to the runner (issue 19, items 3-6): every rejection happens before anything is
written, overrides are never silently beaten by the smoke block, a hand run does not silently
replace another configuration's record, and messages/exit codes are those of the README's
troubleshooting table."""

import subprocess
import sys

import pytest

from repro import records
from repro.pipeline.run import execute

from conftest import REPO

CEILINGS = ["experiment=ceilings/ceilings", "scale=smoke", "device=cpu"]
SMALL = ["experiment.smoke.copy_bytes=1048576", "experiment.smoke.host_copy_bytes=1048576",
         "experiment.smoke.gemm_size=64", "experiment.smoke.repeats=1"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "repro.pipeline.run", *args], capture_output=True, text=True, cwd=REPO)


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished")
    proc = _cli(*CEILINGS, *SMALL, f"out={out}")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.parametrize("bad,code,needle", [
    ("experiment.params.repeats=abc", 2, "experiment.params.repeats"),
    ("trainer.epocs=3", 2, "valid keys: scale, device, seed, out, results, replace, experiment"),
    ("experiment.params.epocs=3", 2, "valid keys for experiment.params of ceilings/ceilings: copy_bytes, "),
    ("device=gpu", 2, "device: must be auto, cuda or cpu, got 'gpu'"),
    ("experiment.inputs.nosuch=x", 2, "experiment.inputs.nosuch"),
])
def test_a_rejected_command_leaves_a_finished_run_as_it_was(finished, bad, code, needle):
    before = _snapshot(finished)
    proc = _cli(*CEILINGS, *SMALL, f"out={finished}", bad)
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert _snapshot(finished) == before  # .hydra/config.yaml included


def test_a_refused_gpu_step_writes_nothing(tmp_path):
    out = tmp_path / "never"
    proc = _cli("experiment=baseline/resnet32", "scale=paper", f"out={out}")
    assert proc.returncode == 3 and "needs 1 CUDA GPU" in proc.stderr
    assert not out.exists()


def test_an_unknown_experiment_lists_the_experiments(tmp_path):
    proc = _cli("experiment=baseline/resnet33", f"out={tmp_path / 'x'}")
    assert proc.returncode == 2
    assert "experiment=baseline/resnet33: no such experiment; available: " in proc.stderr
    assert "baseline/resnet32, " in proc.stderr and not (tmp_path / "x").exists()


def test_a_command_line_param_beats_the_smoke_block(compose, tmp_path):
    from omegaconf import OmegaConf

    cfg = compose(["experiment=ceilings/ceilings", "scale=smoke", f"out={tmp_path}", "device=cpu"])
    OmegaConf.set_struct(cfg, False)
    cfg.experiment = {"name": "echo", "paper": "test", "entry": "fake_experiments:echo", "gpus": 0,
                      "params": {"value": 2.0, "rows": 1}, "smoke": {"rows": 5}}
    rec = records.read(execute(cfg, overrides=["experiment.params.rows=1"]))
    assert rec["params"]["rows"] == 1  # the smoke block said 5: the command line wins
    cfg.replace = True
    rec = records.read(execute(cfg, overrides=[]))  # without the override, the smoke block wins
    assert rec["params"]["rows"] == 5


def test_cli_param_override_reaches_the_record_at_smoke(tmp_path):
    proc = _cli(*CEILINGS, *SMALL[:3], f"out={tmp_path}", "experiment.params.repeats=2")
    assert proc.returncode == 0, proc.stderr
    assert records.read(tmp_path)["params"]["repeats"] == 2  # the smoke block says 5


def test_a_hand_run_does_not_silently_replace_another_configs_record(finished, tmp_path):
    import shutil

    out = tmp_path / "wf"
    shutil.copytree(finished, out)
    before = _snapshot(out)
    proc = _cli(*CEILINGS, *SMALL[:3], f"out={out}", "experiment.smoke.repeats=2")
    assert proc.returncode == 2
    assert "holds a record made with another configuration (params.repeats differ)" in proc.stderr
    assert _snapshot(out) == before
    # the same configuration again is fine; replace=true (what the workflow passes) replaces it
    assert _cli(*CEILINGS, *SMALL, f"out={out}").returncode == 0
    proc = _cli(*CEILINGS, *SMALL[:3], f"out={out}", "experiment.smoke.repeats=2", "replace=true")
    assert proc.returncode == 0, proc.stderr
    assert records.read(out)["params"]["repeats"] == 2
    assert "repeats=2" in (out / ".hydra" / "overrides.yaml").read_text()
