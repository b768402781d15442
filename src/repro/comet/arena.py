"""One payload arena per training step: the saved activations compressed with no host sync, so
that the step can be captured in a CUDA graph (CometHooks' ``payload="arena"``).

The saved tensors of a step are its slots, in call order. A Plan fixes, per slot, the number of
values and a payload budget in words (``margin`` times the largest payload seen, in whole blocks
of 32 words). At a planned step's first slot one buffer is allocated (buffers.layout: scratch,
per-slot metadata, a payload capacity equal to the sum of the budgets) and its scratch zeroed; each
slot is then one compress launch, its payload placed right after the previous slot's by the
kernels (offsets stay on the device), so a slot may use more than its budget as long as the step's
total fits. The buffer lives until the step's last saved tensor is freed (end of backward).

Memory accounting: a planned step holds the whole buffer, unused budget included. Each slot's
share of it (buffers.Layout.slot_bytes) is what the hooks count as that tensor's stored bytes, so
a step's stored bytes equal its allocation. The payload words really used are tracked on the
device (per slot, the largest since the plan) and reported beside it (``replan``, ``metrics``).

Overflow: if a step's payloads exceed the capacity, the kernels write nothing past it and set a
flag; the tiles that did not fit decode as zeros, so that step's gradients are wrong. ``end_step``
(after backward, before the optimiser step) multiplies every gradient by 0 on the device when the
flag is set (the batch contributes nothing; momentum and weight decay still apply) and counts the
step. Blocks holding NaN/Inf are stored raw (bit-exact: the loss is then non-finite, as it would
be uncompressed) and counted: this path cannot refuse them as the exact path does.

Calibration: a step without a plan (the first, or one whose saved tensors differ from the plan's)
compresses every slot exactly (one host sync each, gpu_codec.compress_source) and plans from those
sizes. ``replan`` (at each epoch's end; one sync) re-plans from the largest payloads seen since the
last plan if a step overflowed, the headroom fell under ``margin`` or the budgets exceed the need
by more than ``margin``; each new plan after the first bumps ``version``, the hooks' step key, so
that a CUDA-graph step is captured again with the new arena.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from repro.comet import buffers, gpu_codec
from repro.comet.codec import check_eb


def budgets(words, margin: float) -> tuple[int, ...]:
    """Payload words to reserve per slot: margin x the words seen, rounded up to whole blocks (32 words)."""
    return tuple(32 * math.ceil(int(w) * margin / 32) for w in words)


@dataclass
class Plan:
    layout: buffers.Layout
    slot_bytes: tuple[int, ...]
    max_words: Any  # int64 [S] on the device: each slot's largest payload since the plan (the kernels raise it)
    counters: Any  # int64 [3] on the device: steps that overflowed, blocks holding NaN/Inf, planned steps


class Planner:
    def __init__(self, margin: float = 1.1, kernels_dir=None):
        if not (isinstance(margin, (int, float)) and 1.0 <= margin <= 16.0):
            raise ValueError(f"arena margin must be a number in [1, 16] (payload budget / largest payload seen), "
                             f"got {margin!r}")
        self.margin, self.kernels_dir = float(margin), kernels_dir
        self.plan: Plan | None = None
        self.version = 0
        self.totals = dict(overflow_steps=0, nonfinite_blocks=0, planned_steps=0, plans=0)
        self._retired: Plan | None = None  # kept alive until the next plan: a captured graph points at it
        self._device = None
        self.begin_step()

    def begin_step(self) -> None:
        self._slot = 0
        self._arena = None
        self._observed: list[tuple[int, int]] = []
        self._off_plan = False

    def _new_plan(self, counts, words) -> Plan:
        lay = buffers.layout(counts, budgets(words, self.margin))
        if self.plan is not None:
            self.version += 1
        self._retired, self.totals["plans"] = self.plan, self.totals["plans"] + 1
        return Plan(lay, lay.slot_bytes(), torch.zeros(len(counts), dtype=torch.int64, device=self._device),
                    torch.zeros(3, dtype=torch.int64, device=self._device))

    def encode(self, src: gpu_codec.Source, eb: float):
        """(stream, stored bytes) of the step's next saved tensor."""
        i = self._slot
        self._slot += 1
        self._device = src.tensor.device
        plan = self.plan
        if plan is not None and not self._off_plan and i < len(plan.layout.counts) and plan.layout.counts[i] == src.n:
            lay = plan.layout
            if i == 0:
                self._arena = torch.empty(lay.total_bytes, dtype=torch.uint8, device=src.tensor.device)
                self._arena[:lay.scratch_bytes].zero_()
            base = self._arena.data_ptr()
            slot = gpu_codec.Slot(src.n, float(check_eb(eb)), base + lay.widths[i], base + lay.anchors[i],
                                  base + lay.starts[i], base + lay.payload, lay.capacity, base + lay.bases + 8 * i,
                                  base + lay.flags, base + lay.counters + 4 * i, base + lay.status[i], self._arena)
            gpu_codec.launch_compress(src, eb, slot, plan.max_words.data_ptr() + 8 * i, self.kernels_dir)
            return slot, plan.slot_bytes[i]
        if torch.cuda.is_current_stream_capturing():
            where = "there is no plan yet" if plan is None else \
                f"the plan has {len(plan.layout.counts)} slots" + (f", slot {i} of {plan.layout.counts[i]} values"
                                                                   if i < len(plan.layout.counts) else "")
            raise RuntimeError(f"arena payload: saved tensor {i} ({src.n} values) is not in the step's payload plan "
                               f"({where}); run an eager step with the same shapes before capturing")
        self._off_plan = plan is not None
        c = gpu_codec.compress_source(src, eb, self.kernels_dir)
        self._observed.append((src.n, int(c.payload.numel())))
        return c, c.nbytes

    def end_step(self, model: torch.nn.Module) -> None:
        """After backward, before the optimiser step: void the gradients of a step whose payload
        overflowed (on the device), count it; plan from a step compressed exactly."""
        if self._arena is not None:
            lay = self.plan.layout
            flags = self._arena[lay.flags:lay.flags + 8].view(torch.int32)  # overflow, NaN/Inf blocks
            self.plan.counters[:2].add_(flags)
            self.plan.counters[2].add_(1)
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, flags[0].eq(0).to(grads[0].dtype))
        if self._observed:
            if len(self._observed) == self._slot:  # every slot compressed exactly: a calibration step
                counts, words = zip(*self._observed)
                self.plan = self._new_plan(counts, words)
            else:  # the plan held for some slots only: drop it, the next step calibrates
                self._retired, self.plan = self.plan, None
                self.version += 1
        self.begin_step()

    def replan(self) -> dict:
        """At an epoch's end (one sync): this plan's counters for the epoch's row; a new plan if
        the payloads outgrew the budgets or shrank well below them."""
        plan = self.plan
        if plan is None:
            return {}
        used = plan.max_words.tolist()
        overflows, nonfinite, steps = plan.counters.tolist()
        for key, value in (("overflow_steps", overflows), ("nonfinite_blocks", nonfinite), ("planned_steps", steps)):
            self.totals[key] += value
        lay = plan.layout
        row = dict(codec_reserved_bytes=lay.total_bytes, codec_used_max_bytes=lay.total_bytes - 4 * (lay.capacity - sum(used)),
                   codec_overflow_steps=overflows, codec_nonfinite_blocks=nonfinite, codec_planned_steps=steps)
        need = sum(budgets(used, self.margin))
        if steps and (overflows or need > lay.capacity or need * self.margin < lay.capacity):
            self.plan = self._new_plan(lay.counts, used)
        else:
            plan.max_words.zero_()
            plan.counters.zero_()
        row["codec_plan_version"] = self.version
        return row

    def metrics(self) -> dict:
        """Totals over the run (folding in the current plan's counters: one sync)."""
        out = {f"codec_{k}": float(v) for k, v in self.totals.items()}
        if self.plan is not None:
            overflows, nonfinite, steps = self.plan.counters.tolist()
            out["codec_overflow_steps"] += overflows
            out["codec_nonfinite_blocks"] += nonfinite
            out["codec_planned_steps"] += steps
            out["codec_reserved_bytes"] = float(self.plan.layout.total_bytes)
            out["codec_arena_margin"] = self.margin
        return out
