"""Each GPU job claims its own GPU on a multi-GPU machine (repro.gpu_slots)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from repro import gpu_slots


def test_second_job_gets_the_next_gpu_and_waits_when_all_are_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; from pathlib import Path; from repro.gpu_slots import claim_gpu; "
         f"print(claim_gpu(Path({str(tmp_path)!r}), count=2), os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
         "time.sleep(3)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().split() == ["0", "0"]
    assert gpu_slots.claim_gpu(tmp_path, count=2) == 1
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    # a third job finds both taken and waits until the holder exits
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    t0 = time.monotonic()
    assert gpu_slots.claim_gpu(tmp_path, count=2, poll_s=0.2) == 0
    assert time.monotonic() - t0 > 0.5
    holder.wait()
    for fh in gpu_slots._held:
        fh.close()
    gpu_slots._held.clear()


def test_no_claim_where_the_scheduler_chose_or_one_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpu_slots.claim_gpu(tmp_path, count=4) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_slots.claim_gpu(tmp_path, count=1) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_cli_runs_the_command_on_its_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpu_slots, "gpu_count", lambda: 2)
    out = tmp_path / "env"
    code = gpu_slots.main(["--locks", str(tmp_path), "--", sys.executable, "-c",
                           f"import os; open({str(out)!r}, 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])"])
    assert code == 0 and out.read_text() == "0"
    for fh in gpu_slots._held:
        fh.close()
    gpu_slots._held.clear()
