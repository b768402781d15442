"""Where one SuperNeurons throughput step spends its time: torch.profiler over a probe's timed steps.

    python tools/debug/sn_step_profile.py [--blocks 64] [--arms plain ours] [--out DIR] [--device cuda] [--trace]

Each arm runs one probe in this process (repro.papers.superneurons.probe.run_probe) with the paper-scale
settings of config/experiment/superneurons/throughput.yaml (12 GiB cap, batch 32, 224x224); only its
timed steps are profiled (CPU and CUDA activity). Writes DIR/<arm>_b<blocks>_ops.csv (per op: calls,
self CPU and self device microseconds per step), with --trace DIR/<arm>_b<blocks>.trace.json (a Chrome/Perfetto
trace, about 10 MB at 64 blocks), and prints per arm: wall ms per step, the ms of device kernels per step (summed over streams)
and the ops with the most self CPU time. Wall time well above the kernel time means the step waits
on the host (Python, hooks, launches) or on copies. A design aid for docs/gpu-notes.md: it writes no
record. On a CPU (``--device cpu --blocks 4 --image-size 32``) it runs the code path at toy size.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf
from torch.profiler import ProfilerActivity, profile

from repro.papers.superneurons import arms as sn_arms
from repro.papers.superneurons.probe import ProbeSpec, run_probe

CONFIG = Path(__file__).resolve().parents[2] / "config/experiment/superneurons/throughput.yaml"
SPEC_KEYS = {"batch_size", "warmup", "steps", "lr", "momentum", "weight_decay", "lookahead",
             "max_inflight_bytes", "host_fraction", "plan_margin"}


def _self_device_us(event) -> float:
    # torch >= 2.4 names it self_device_time_total; older releases self_cuda_time_total
    return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))


def profile_arm(spec: ProbeSpec, out: Path, trace: bool = False) -> dict:
    """Run ``spec`` with its timed steps under torch.profiler; write the op table and trace."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if spec.device.startswith("cuda") else [])
    prof = profile(activities=activities)
    original, calls = sn_arms.Arm.step, [0]

    def step(self, x, y):
        if calls[0] == spec.warmup:
            prof.start()
        loss = original(self, x, y)
        calls[0] += 1
        if calls[0] == spec.warmup + spec.steps:
            if spec.device.startswith("cuda"):
                torch.cuda.synchronize()
            prof.stop()
        return loss

    sn_arms.Arm.step = step
    try:
        result = run_probe(spec)
    finally:
        sn_arms.Arm.step = original
    name = f"{spec.arm}_b{spec.model_kw.get('blocks')}"
    if not result.get("fits"):
        return dict(arm=spec.arm, reason=result.get("reason"))
    events = prof.key_averages()
    ops = pd.DataFrame([dict(op=e.key, calls=e.count / spec.steps, self_cpu_us=e.self_cpu_time_total / spec.steps,
                             self_device_us=_self_device_us(e) / spec.steps) for e in events])
    ops = ops.sort_values("self_cpu_us", ascending=False)
    ops.to_csv(out / f"{name}_ops.csv", index=False)
    if trace:
        prof.export_chrome_trace(str(out / f"{name}.trace.json"))
    kernels = sum(_self_device_us(e) for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA) / spec.steps
    return dict(arm=spec.arm, wall_ms=result["step_s"] * 1e3, kernel_ms=kernels / 1e3,
                top_cpu=", ".join(f"{r.op} {r.self_cpu_us / 1e3:.1f}" for r in ops.head(6).itertuples()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=64)
    ap.add_argument("--arms", nargs="+", default=["plain", "ours"])
    ap.add_argument("--out", type=Path, default=Path("results/debug/sn_step_profile"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--trace", action="store_true", help="also write each arm's Chrome trace")
    ap.add_argument("--image-size", type=int, default=None, help="default: the model's (224)")
    args = ap.parse_args(argv)
    params = OmegaConf.to_container(OmegaConf.load(CONFIG))["params"]
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for arm in args.arms:
        cap = params["cap_gib"] * 2**30 if args.device.startswith("cuda") else None
        spec = ProbeSpec(arm=arm, model="bottleneck_resnet", model_kw={"blocks": args.blocks}, device=args.device,
                         cap_bytes=cap, image_size=args.image_size, num_classes=10 if args.image_size else None,
                         **{k: v for k, v in params.items() if k in SPEC_KEYS})
        rows.append(profile_arm(spec, args.out, args.trace))
        print(rows[-1], flush=True)
    pd.DataFrame(rows).to_csv(args.out / f"summary_b{args.blocks}.csv", index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
