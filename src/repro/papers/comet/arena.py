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

from repro.papers.comet import buffers, codec, gpu_codec


class Buffer:
    """One allocation holding the scratch, streams and shared payload of S slots (buffers.layout);
    ``reset`` zeroes the scratch (one memset), ``compress`` is one launch into slot i."""

    def __init__(self, lay: buffers.Layout, device):
        self.layout = lay
        self.tensor = torch.empty(lay.total_bytes, dtype=torch.uint8, device=device)
        self.reset()

    @staticmethod
    def worst_case(counts, device) -> Buffer:
        """Room for every block raw (1024 words per block): nothing can overflow."""
        return Buffer(buffers.layout(counts, [codec.BLOCK * codec.nblocks(n) for n in counts]), device)

    def reset(self) -> None:
        self.tensor[:self.layout.scratch_bytes].zero_()

    def slot(self, i: int, eb: float) -> gpu_codec.Slot:
        lay, base = self.layout, self.tensor.data_ptr()
        eb32 = float(gpu_codec.quantizer(float(eb))[0])
        return gpu_codec.Slot(lay.counts[i], eb32, base + lay.widths[i], base + lay.anchors[i], base + lay.starts[i],
                              base + lay.payload, lay.capacity, base + lay.bases + 8 * i, base + lay.flags,
                              base + lay.counters + 4 * i, base + lay.status[i], self.tensor)

    def compress(self, i: int, src: gpu_codec.Source, eb: float, max_words: int = 0,
                 kernels_dir=None) -> gpu_codec.Slot:
        if src.n != self.layout.counts[i]:
            raise ValueError(f"slot {i} holds {self.layout.counts[i]} values, got a tensor of {src.n}")
        slot = self.slot(i, eb)
        gpu_codec.launch_compress(src, eb, slot, max_words, kernels_dir)
        return slot

    def flags(self):
        """int32 [payload overflowed, blocks holding NaN/Inf] (device)."""
        return self.tensor[self.layout.flags:self.layout.flags + 8].view(torch.int32)

    def bases(self):
        """int64 [S + 1] (device): slot i's payload is words bases[i]..bases[i + 1]."""
        lay = self.layout
        return self.tensor[lay.bases:lay.bases + 8 * (len(lay.counts) + 1)].view(torch.int64)

    def stream(self, i: int, eb: float) -> codec.Compressed:
        """Slot i as a stream of views into the buffer (one sync, to read where its payload is)."""
        lay = self.layout
        nb = codec.nblocks(lay.counts[i])
        start, end = self.bases()[i:i + 2].tolist()
        words = self.tensor[lay.payload:].view(torch.int32)
        return codec.Compressed(n=lay.counts[i], eb=float(codec.check_eb(eb)),
                                widths=self.tensor[lay.widths[i]:lay.widths[i] + nb],
                                anchors=self.tensor[lay.anchors[i]:lay.anchors[i] + 4 * nb].view(torch.int32),
                                payload=words[start:end],
                                tile_starts=self.tensor[lay.starts[i]:lay.starts[i] + 8 * buffers.ntiles(nb)]
                                .view(torch.int64) - start)


def budgets(words, margin: float) -> tuple[int, ...]:
    """Payload words to reserve per slot: margin x the words seen, rounded up to whole blocks (32 words)."""
    return tuple(32 * -(-math.ceil(int(w) * margin - 1e-9) // 32) for w in words)


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
            if i == 0:
                self._arena = Buffer(plan.layout, src.tensor.device)
            slot = self._arena.compress(i, src, eb, plan.max_words.data_ptr() + 8 * i, self.kernels_dir)
            return slot, plan.slot_bytes[i]
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
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
            flags = self._arena.flags()
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
        row = dict(codec_reserved_bytes=lay.total_bytes,
                   codec_used_max_bytes=lay.total_bytes - 4 * (lay.capacity - sum(used)),
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
