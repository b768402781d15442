"""One bounded training probe: build a model, run one arm for a few SGD steps on a synthetic batch
under a memory cap, report whether it fit, its peak / static memory and its step time.

``run_probe`` runs in this process; ``run_isolated`` runs it in a fresh Python process
(``python -m repro.papers.superneurons.probe '<json spec>'``), so every probe starts from a clean CUDA
memory state and a probe that the kernel kills for host memory only loses its own process.

Before training, a probe checks the pinned host memory its arm would need (the liveness estimate)
against what the host has available, and refuses (``reason="host memory"``) instead of risking the
OOM killer. On the CPU nothing can be measured by a CUDA allocator: a probe with a cap then decides
"fits" from the liveness estimate (static + dynamic <= cap) and says so (``measured=False``).

Memory budget of the runtime ("ours"): cap - static (estimate) - ``plan_margin`` x cap. The plan
itself counts the working set; the margin covers what it does not model: allocator fragmentation
and transients (cuDNN workspace, autograd's temporaries). On the H200 at 840-910 blocks the
measured peak exceeded the plan's estimate by 0.77 GB and the deepest probe that fitted peaked at
12.06 GB allocated under the 12.88 GB cap (980 blocks ran out of reserved memory). 12.5% of the cap
(1.6 GB) is the margin the former budget, 0.8 x (cap - static), left at that depth; it is now the
same at every depth instead of growing to 2.4 GB at 64 blocks.

Convolution workspace: see WSCAP_ENV. Peak statistics are reset after the warmup steps, so the
first steps' algorithm selection (cuDNN's heuristic configs tried until one can allocate its
workspace, or with ``cudnn.benchmark`` every candidate timed with its workspace) is not measured;
probes leave ``cudnn.benchmark`` off (PyTorch's default) and record cuDNN's settings.

Diagnostics (per timed step, ``per_step``): bytes the pool offloaded and prefetched, late fetches,
host seconds forward waited for copies, host seconds in SGDInBackward's updates. ``memory_marks``
(the runtime's arms on the GPU, bytes above the step's start, of the last step): allocated and
peak-so-far when forward ends, the most allocated at a recomputed segment's backward entry with its
index, and the segment whose backward last raised the peak (``peak_segment``), so that a table says
whether the peak is in forward or in which segment's backward. The peak counter is reset at every
timed step (the peak is the largest over them): reset once before them, the second step's
"peak-so-far at forward's end" held the first step's backward peak, and every network's peak
seemed to be in forward.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from repro.data.synthetic import synthetic_batch
from repro.models import build_model, get_entry
from repro.papers.superneurons.arms import ARMS, LAYER_ARMS, LAYER_CONFIGS, PEAK_CONFIGS, Arm, Optim, check_arm_names
from repro.papers.superneurons.liveness import flatten_units, largest_working_set, param_bytes, profile_units

RESULT_PREFIX = "PROBE_RESULT "
MIB = 2**20

# SuperNeurons' fourth mechanism, the fastest convolution algorithm whose workspace fits, is not
# something PyTorch exposes; what it allows is cuDNN's workspace cap, the environment variable
# CUDNN_CONV_WSCAP_DBG (MiB). ATen does not read it: aten/src/ATen/native/cudnn/Conv_v8.cpp (read at
# pytorch/pytorch@06ca69ca: the backend-API path through cudnn_frontend that PyTorch also takes with
# cuDNN 9) and Conv_v7.cpp have no reference to it, and PyTorch's docs
# (docs/source/cuda_environment_variables.rst) list it under "CUDA Runtime and Libraries Environment
# Variables": libcudnn reads it. ATen's own choice, in Conv_v8.cpp: with cudnn.benchmark off it runs
# the first heuristic engine config whose workspace the caching allocator can allocate (try_configs
# moves on after an OOM), with benchmark on it times the plans whose workspace fits the allocator's
# largest free cached block (get_available_workspace); neither looks at what the plan leaves free.
# Since we cannot see when libcudnn reads the variable, it is set in the probe process's environment
# before Python starts (run_isolated; an in-process probe records that it was not applied). Whether
# cuDNN 9 still honours it is not documented anywhere we found: on the GPU, the "all" vs "all+wscap"
# rows of the peak-memory table are the test (on the H200 they are equal to the byte, so it does not).
# ATen's own fallback (try_configs) was tried as well, on the H200 (docs/gpu-notes.md): the probe process
# capped at the plan's need x 1.05, so that a convolution whose preferred engine config needs more
# workspace than is left falls back to one that fits. It changed nothing: the plan's estimate is
# built from the profiled transients, which already hold the workspace the uncapped convolutions
# took (VGG-16 "all" at batch 32: 2,160,332,288 bytes measured, 2,160,329,728 estimated), so the cap
# left room for exactly that workspace; and at batch 8 the cap ran out of memory on an activation.
# Making it bite needs the profile to tell workspace from other transients; see docs/gpu-notes.md.
WSCAP_ENV = "CUDNN_CONV_WSCAP_DBG"


@dataclass
class ProbeSpec:
    arm: str
    model: str = "bottleneck_resnet"
    model_kw: dict = field(default_factory=dict)
    batch_size: int = 32
    image_size: int | None = None  # None: the model's own input size
    num_classes: int | None = None
    device: str = "cpu"
    cap_bytes: float | None = None  # per-process GPU memory cap (on the CPU: the estimate's cap)
    warmup: int = 1  # untimed steps (the first one profiles and plans)
    steps: int = 2  # timed steps
    plan_margin: float = 0.125  # share of the cap the runtime's plan leaves free (see the module docstring)
    pool_budget_bytes: float | None = None  # ablation configs: resident pool bytes
    budget_bytes: float | None = None  # ours: this dynamic-memory budget instead of the cap's (matched-peak runs)
    workspace_cap_mib: int | None = None  # cuDNN workspace cap (WSCAP_ENV) of an isolated probe
    lookahead: int = 2
    max_inflight_bytes: float = 512 * 2**20  # GPU memory of offloads still copying before forward waits
    momentum_on_host: str = "auto"  # auto | yes | no; auto: on the host when 2 x params > 40% of the cap
    host_fraction: float = 0.7  # share of the available host memory a probe may pin
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    seed: int = 0

    def __post_init__(self):
        check_arm_names([self.arm], tuple(dict.fromkeys(ARMS + LAYER_ARMS + PEAK_CONFIGS + LAYER_CONFIGS)), "probe")
        if self.budget_bytes is not None and self.arm != "ours":
            raise ValueError(f"budget_bytes is ours' memory budget; arm {self.arm!r} has none")
        if self.momentum_on_host not in ("auto", "yes", "no"):
            raise ValueError(f"momentum_on_host must be auto, yes or no, got {self.momentum_on_host!r}")
        if self.steps < 1 or self.warmup < 1:
            raise ValueError("a probe needs warmup >= 1 and steps >= 1")
        if self.workspace_cap_mib is not None and self.workspace_cap_mib < 1:
            raise ValueError(f"workspace_cap_mib must be >= 1 MiB or None, got {self.workspace_cap_mib}")


def probe_env(spec: ProbeSpec) -> dict:
    """The environment of an isolated probe's process: this one's, with the spec's workspace cap (and
    none when the spec has none, so that an uncapped configuration stays uncapped)."""
    env = {k: v for k, v in os.environ.items() if k != WSCAP_ENV}
    if spec.workspace_cap_mib is not None:
        env[WSCAP_ENV] = str(int(spec.workspace_cap_mib))
    return env


def cudnn_settings() -> dict:
    """cuDNN settings this process trains with, and the workspace cap it was started with."""
    cudnn = torch.backends.cudnn
    return dict(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                allow_tf32=cudnn.allow_tf32, version=cudnn.version() if cudnn.is_available() else None,
                wscap_env=os.environ.get(WSCAP_ENV))


def largest_working_set_estimate(model: str, model_kw: dict, batch_size: int, image_size: int | None,
                                 num_classes: int | None) -> int:
    """The largest single-layer working set (bytes) of ``model`` at ``batch_size``, from a CPU profile
    at batch 2 (activations scale with the batch, parameters do not; batch norm needs 2 samples): the
    "auto" workspace cap must be known before the probe's process starts, before the GPU is touched."""
    torch.manual_seed(0)
    net = build_model(model, num_classes, **model_kw)
    size = image_size or get_entry(model).input_size
    small = min(2, batch_size)
    profiles = profile_units(flatten_units(net), torch.zeros(small, 3, size, size))
    return max(batch_size * (p.working_set - p.param_bytes) // small + p.param_bytes for p in profiles)


def available_host_bytes() -> float:
    """MemAvailable of /proc/meminfo (Linux); infinite where there is none (no check possible)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return math.inf


def _momentum_on_host(spec: ProbeSpec, params: int) -> bool:
    if spec.momentum_on_host != "auto":
        return spec.momentum_on_host == "yes"
    return spec.cap_bytes is not None and 2 * params > 0.4 * spec.cap_bytes


def _workspace_counted(spec: ProbeSpec, cuda: bool) -> float:
    """Workspace bytes the plan counts next to the working set: the cap, where cuDNN runs under it
    (on the GPU, in a process started with it); no cap is known otherwise."""
    applied = spec.workspace_cap_mib is not None and os.environ.get(WSCAP_ENV) == str(int(spec.workspace_cap_mib))
    return spec.workspace_cap_mib * MIB if cuda and applied else 0.0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_probe(spec: ProbeSpec) -> dict:
    device = torch.device(spec.device)
    cuda = device.type == "cuda"
    if cuda and device.index is None:  # the memory-fraction API wants an index
        device = torch.device("cuda", torch.cuda.current_device())
    if cuda and spec.cap_bytes is not None:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, spec.cap_bytes / total), device)
    out = dict(arm=spec.arm, fits=False, reason="", measured=cuda, cudnn=cudnn_settings(),
               workspace_cap_mib=spec.workspace_cap_mib,
               **{k: v for k, v in spec.model_kw.items() if k == "blocks"})
    arm = model = x = y = None
    try:
        torch.manual_seed(spec.seed)
        with device:
            model = build_model(spec.model, spec.num_classes, **spec.model_kw)
        size = spec.image_size or get_entry(spec.model).input_size
        classes = spec.num_classes or get_entry(spec.model).num_classes
        if get_entry(spec.model).tokens:  # a language model: token ids in, next-token targets
            gen = torch.Generator(device=device).manual_seed(spec.seed)
            x, y = (torch.randint(0, classes, (spec.batch_size, size), generator=gen, device=device) for _ in "xy")
        else:
            x, y = synthetic_batch(spec.batch_size, image_size=size, num_classes=classes, seed=spec.seed,
                                   device=device)
        params = param_bytes(model)
        host_momentum = _momentum_on_host(spec, params)
        static_est = params * (1 if host_momentum else 2)
        budget = None if spec.cap_bytes is None else \
            max(0.0, spec.cap_bytes - static_est - spec.plan_margin * spec.cap_bytes)
        if spec.budget_bytes is not None:
            budget = spec.budget_bytes
        arm = Arm(spec.arm, model, Optim(spec.lr, spec.momentum, spec.weight_decay), memory_budget_bytes=budget,
                  pool_budget_bytes=spec.pool_budget_bytes, lookahead=spec.lookahead,
                  momentum_on_host=host_momentum, max_inflight_bytes=spec.max_inflight_bytes,
                  workspace_bytes=_workspace_counted(spec, cuda))
        if arm.runtime is not None:
            profiles = arm.prepare(x).profiles
            out["plan"] = arm.runtime.plan.summary()
            out["sgd"] = arm.sgd_placement
        else:
            profiles = profile_units(arm.ensure_units(x), x) if (not cuda or spec.arm == "save_on_cpu") else None
        out.update(params_bytes=params, momentum_on_host=host_momentum)
        if profiles is not None:
            out.update(largest_working_set=largest_working_set(profiles).working_set,
                       largest_working_set_ws=max(p.need for p in profiles),
                       est_dynamic_bytes=arm.estimated_dynamic(profiles, x), est_static_bytes=arm.estimated_static())
            host_need, host_avail = arm.estimated_host(profiles), available_host_bytes()
            out.update(est_host_bytes=host_need)
            if host_need > spec.host_fraction * host_avail:
                out["reason"] = (f"host memory: needs ~{host_need / 2**30:.1f} GiB pinned, "
                                 f"{host_avail / 2**30:.1f} GiB available")
                return out
            if not cuda and spec.cap_bytes is not None and \
                    out["est_static_bytes"] + out["est_dynamic_bytes"] > spec.cap_bytes:
                out["reason"] = "estimate over cap"
                return out
        for _ in range(spec.warmup):
            arm.step(x, y)
        _sync(device)
        if arm.runtime is not None:  # diagnostics of the timed steps only
            arm.runtime.pool.reset_stats()
            if arm.sgd is not None:
                arm.sgd.host_s = 0.0
        peak_allocated = 0
        if cuda:
            start_bytes = torch.cuda.memory_allocated(device)  # the batch (x, y) is not the model's
            static = start_bytes - x.numel() * x.element_size() - y.numel() * y.element_size()
        start = time.perf_counter()
        for _ in range(spec.steps):
            if cuda:  # per step, so that the memory marks place the last step's own peak (host-side counters)
                torch.cuda.reset_peak_memory_stats(device)
            loss = arm.step(x, y)
            if cuda:
                peak_allocated = max(peak_allocated, torch.cuda.max_memory_allocated(device))
        _sync(device)
        step_s = (time.perf_counter() - start) / spec.steps
        loss = float(loss)
        if not math.isfinite(loss):
            out["reason"] = f"loss not finite ({loss})"
            return out
        out.update(fits=True, reason="ok", step_s=step_s, images_per_s=spec.batch_size / step_s, loss=loss)
        if cuda:
            peak = peak_allocated - (start_bytes - static)
            out.update(peak_bytes=peak, static_bytes=static, dynamic_bytes=peak - static)
            if arm.runtime is not None and arm.runtime.memory_marks:  # where the last step's peak was
                out["memory_marks"] = {k: (v if k.endswith("_segment") else v - start_bytes)
                                       for k, v in arm.runtime.memory_marks.items()}
        if arm.runtime is not None:
            stats = arm.runtime.pool.stats
            out["pool"] = stats.as_dict()
            out["per_step"] = dict(offloaded_bytes=stats.offloaded_bytes / spec.steps,
                                   prefetched_bytes=stats.prefetched_bytes / spec.steps,
                                   late_fetches=stats.late_fetches / spec.steps,
                                   inflight_wait_s=stats.inflight_wait_s / spec.steps,
                                   sgd_host_s=arm.sgd.host_s / spec.steps if arm.sgd is not None else 0.0)
        return out
    except torch.OutOfMemoryError as e:
        out["reason"] = "oom: " + str(e).split("\n")[0][:200]
        return out
    finally:
        if arm is not None:
            arm.close()
        del arm, model, x, y
        if cuda:  # an OOM traceback holds tensors: free them before the next probe in this process
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(1.0, device)


class ProbeCache:
    """Finished probes of a run that has not finished yet (JSON lines beside its record), so that a
    killed peak-memory table or depth search resumes where it stopped instead of probing again.

    An entry is reused only for the same spec under the same ``fingerprint`` (the probing code, the
    torch version and the device: :func:`probe_fingerprint`); the experiment deletes the file once
    its record is written, and tags how many probes it took from here."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.fingerprint = Path(path), fingerprint
        self.entries: dict[str, dict] = {}
        self.reused = 0
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:  # a line cut by the kill: that probe runs again
                    continue
                if entry.get("fingerprint") == fingerprint:
                    self.entries[entry["key"]] = entry["result"]

    @staticmethod
    def key(spec: ProbeSpec) -> str:
        return json.dumps(dataclasses.asdict(spec), sort_keys=True)

    def get(self, spec: ProbeSpec) -> dict | None:
        result = self.entries.get(self.key(spec))
        if result is not None:
            self.reused += 1
            return dict(result, resumed=True)
        return None

    def put(self, spec: ProbeSpec, result: dict) -> None:
        self.entries[self.key(spec)] = result
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(dict(key=self.key(spec), fingerprint=self.fingerprint, result=result)) + "\n")

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def probe_fingerprint(device: str) -> str:
    """What a probe's result depends on besides its spec: the runtime's and the models' code, the
    torch version and the GPU's name."""
    import hashlib

    here = Path(__file__).resolve().parent  # src/repro/papers/superneurons
    digest = hashlib.sha256()
    for path in sorted([*here.glob("*.py"), *here.parents[1].joinpath("models").glob("*.py")]):
        digest.update(path.name.encode() + path.read_bytes())
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    return f"{digest.hexdigest()[:16]}|torch {torch.__version__}|{gpu}"


def run_isolated(spec: ProbeSpec, timeout_s: float, log=None) -> dict:
    """run_probe in a fresh process; a crash or timeout is a probe that did not fit, with the reason."""
    cmd = [sys.executable, "-m", "repro.papers.superneurons.probe", json.dumps(dataclasses.asdict(spec))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=probe_env(spec))
    except subprocess.TimeoutExpired:
        return dict(arm=spec.arm, fits=False, reason=f"timeout after {timeout_s:.0f}s", measured=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = (proc.stderr or "").strip().splitlines()[-3:]
    if log is not None:
        log.warning("probe %s exited %s without a result: %s", spec.arm, proc.returncode, " | ".join(tail))
    return dict(arm=spec.arm, fits=False, measured=False,
                reason=f"probe process exited {proc.returncode}: {' | '.join(tail)[:300]}")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m repro.papers.superneurons.probe '<json ProbeSpec>'", file=sys.stderr)
        return 2
    result = run_probe(ProbeSpec(**json.loads(argv[0])))
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
