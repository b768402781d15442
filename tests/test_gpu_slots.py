"""Each GPU job claims GPUs of its own on a multi-GPU machine (repro.pipeline.gpu_slots)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from repro.pipeline import gpu_slots

AT_START = os.environ.get("CUDA_VISIBLE_DEVICES")


def test_second_job_gets_the_next_gpu_and_waits_when_all_are_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; from pathlib import Path; from repro.pipeline.gpu_slots import claim_gpus; "
         f"print(claim_gpus(1, Path({str(tmp_path)!r}), count=2)[0], os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
         "time.sleep(3)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().split() == ["0", "0"]
    assert gpu_slots.claim_gpus(1, tmp_path, count=2) == [1]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    # a third job finds both taken and waits until the holder exits
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    t0 = time.monotonic()
    assert gpu_slots.claim_gpus(1, tmp_path, count=2, poll_s=0.2) == [0]
    assert time.monotonic() - t0 > 0.5
    holder.wait()
    for fh in gpu_slots._held:
        fh.close()
    gpu_slots._held.clear()


def test_no_claim_where_the_scheduler_chose_or_one_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert gpu_slots.claim_gpus(1, tmp_path, count=4) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_slots.claim_gpus(1, tmp_path, count=1) is None
    assert gpu_slots.claim_gpus(2, tmp_path, count=2) is None
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def _release():
    for fh in gpu_slots._held:
        fh.close()
    gpu_slots._held.clear()


def test_a_two_gpu_job_takes_two_free_ones_or_waits(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import os, time; from pathlib import Path; from repro.pipeline.gpu_slots import claim_gpus; "
         f"claim_gpus(3, Path({str(tmp_path)!r}), count=4); print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
         "time.sleep(2)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "0,1,2"
    t0 = time.monotonic()  # one GPU is free, two are wanted: it waits for the holder, holding none meanwhile
    got = gpu_slots.claim_gpus(2, tmp_path, count=4, poll_s=0.2)
    # only GPU 3 was free while the holder lived, so the claim waited for one of the holder's; which
    # two it takes depends on where its scan was when the holder's locks went ([0, 1], or [2, 3] when
    # the holder exited mid-scan)
    assert len(set(got)) == 2 and set(got) <= {0, 1, 2, 3} and set(got) & {0, 1, 2}
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, got)) and time.monotonic() - t0 > 0.5
    holder.wait()
    _release()


def test_visible_gpus_counts_what_the_scheduler_gave(monkeypatch):
    monkeypatch.setattr(gpu_slots, "gpu_count", lambda: 8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert gpu_slots.visible_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_slots.visible_gpus() == 0
    # CUDA reads entries up to the first that is not a device: -1 hides every GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert gpu_slots.visible_gpus() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,3")
    assert gpu_slots.visible_gpus() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2c,MIG-1a")
    assert gpu_slots.visible_gpus() == 2


def test_visible_gpus_is_none_on_a_machine_without_gpus_whatever_the_variable_says(monkeypatch):
    monkeypatch.setattr(gpu_slots, "gpu_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpu_slots.visible_gpus() == 0


def test_a_claim_made_in_a_test_does_not_reach_later_tests_part_1(tmp_path, monkeypatch):
    # claim_gpus writes os.environ itself (not through monkeypatch); conftest puts the variable back
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_slots.claim_gpus(1, tmp_path, count=2) == [0]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    _release()


def test_a_claim_made_in_a_test_does_not_reach_later_tests_part_2():
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == AT_START


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
