"""Where the compress kernels of one step find their data: byte offsets inside one buffer.

A buffer serves S compressed tensors ("slots", in call order) and holds, in this order:

scratch  (zeroed before the first launch)  bases int64[S + 1] (slot i's payload starts at word
         bases[i]; its kernel writes bases[i + 1]), flags int32[2] (payload overflow, blocks holding
         NaN/Inf), one tile counter int32 per slot, one look-back status uint64 per tile of every slot;
stream   per slot: tile starts int64[tiles] (the payload word where each tile of TILE_BLOCKS blocks
         begins), anchors int32[blocks], widths uint8[blocks];
payload  uint32[capacity], shared by the slots back to back (128-byte aligned).

``slot_bytes`` splits the buffer's bytes over the slots (each its stream arrays, scratch words and
payload budget; the fixed header and alignment go to slot 0), so that a per-layer account of what
a step reserves adds up to the allocation exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.papers.comet.codec import nblocks

TILE_BLOCKS = 8  # blocks per CTA (comet_codec.cu)
PAYLOAD_ALIGN = 128


def ntiles(nb: int) -> int:
    return -(-nb // TILE_BLOCKS)


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


@dataclass(frozen=True)
class Layout:
    counts: tuple[int, ...]  # values per slot
    budgets: tuple[int, ...]  # payload words reserved per slot (their sum is the capacity)
    bases: int
    flags: int
    counters: int
    status: tuple[int, ...]
    scratch_bytes: int
    starts: tuple[int, ...]
    anchors: tuple[int, ...]
    widths: tuple[int, ...]
    payload: int
    total_bytes: int
    capacity: int  # payload words: the sum of the budgets

    def slot_bytes(self) -> tuple[int, ...]:
        """Bytes of the buffer attributed to each slot; they sum to total_bytes."""
        shares = []
        for i, (n, budget) in enumerate(zip(self.counts, self.budgets)):
            nb = nblocks(n)
            shares.append(8 * ntiles(nb) * 2 + 5 * nb + 4 + 8 + 4 * budget)
        if shares:
            shares[0] += self.total_bytes - sum(shares)
        return tuple(shares)


def layout(counts, budgets) -> Layout:
    """The buffer of slots with ``counts`` values and ``budgets`` payload words."""
    counts, budgets = tuple(int(c) for c in counts), tuple(int(b) for b in budgets)
    if len(counts) != len(budgets) or any(c < 1 for c in counts) or any(b < 0 for b in budgets):
        raise ValueError(f"need one budget >= 0 per slot of >= 1 value, got counts {counts}, budgets {budgets}")
    s = len(counts)
    pos = 0
    bases, pos = pos, pos + 8 * (s + 1)
    flags, pos = pos, pos + 8
    counters, pos = pos, pos + 4 * s
    pos = _align(pos, 8)
    status = []
    for n in counts:
        status.append(pos)
        pos += 8 * ntiles(nblocks(n))
    scratch = _align(pos, 16)
    pos = scratch
    starts, anchors, widths = [], [], []
    for n in counts:
        nb = nblocks(n)
        starts.append(pos)
        pos = _align(pos + 8 * ntiles(nb), 16)
        anchors.append(pos)
        pos = _align(pos + 4 * nb, 16)
        widths.append(pos)
        pos = _align(pos + nb, 16)
    payload = _align(pos, PAYLOAD_ALIGN)
    return Layout(counts, budgets, bases, flags, counters, tuple(status), scratch, tuple(starts), tuple(anchors),
                  tuple(widths), payload, payload + 4 * sum(budgets), sum(budgets))
