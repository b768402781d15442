"""Analytical model of AIDA, an associative processor (AP) running sparse fully-connected layers,
against EIE's published configuration on EIE's AlexNet and VGG-16 benchmark layers (batch 1).

The AP is a content-addressable memory of ``rows`` rows; one cycle compares a pattern against every
row (tagging the matches) or writes a pattern into every tagged row. Arithmetic is bit-serial and
word-parallel: a function is applied one bit position at a time as a sequence of passes, one pass
(a compare and a write) per truth-table row whose output differs from the bits it overwrites
(``in_place_add_passes`` derives the 4 passes of an in-place full add from its truth table, so an
m-bit add costs m x 4 x (compare + write) cycles, whatever the number of rows).

A sparse FC layer y = W x in the AP: each row holds one nonzero weight with its input index, and
  broadcast  each nonzero activation x_j is compared against the rows' input-index field and written
             into the matching rows: (compare + write) cycles per nonzero activation;
  multiply   every row multiplies its weight by its activation at once, shift-and-add: one
             conditional in-place add of the activation per weight bit (the weight bit joins the
             compare pattern, same passes);
  reduce     the products of one output neuron (its nonzero weights, contiguous rows) are summed by
             a tree: per level a partial sum moves to its neighbour row (``move_cycles_per_bit`` per
             bit) and is added in place; the partial sums grow one bit per level.
A layer with more nonzero weights than rows runs in ceil(nnz / rows) chunks, each repeating the three.

EIE (64 PEs at 800 MHz, one multiply-accumulate per PE per cycle, 2 x 64 x 0.8 = 102.4 GOPS, the
abstract's 102 GOPS) skips zero activations and zero weights: a layer takes
nnz(W) x density(x) / (PEs x load balance) cycles.

Every parameter says where it comes from: cited in ``SOURCES`` or listed in ``ASSUMED`` (the
comment says why its default); a test checks that every field is in exactly one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from itertools import product


@dataclass
class APParams:
    """AIDA's associative processor. AIDA's own figures are in the body of arXiv 1901.04976, which no
    stored copy we could read holds (only its abstract): all of these are assumed."""
    rows: float = 1048576.0         # assumed: 2^20 rows of ~64 bits ~ 8 MB, about EIE's weight SRAM (64 PEs x 128 KB)
    clock_ghz: float = 1.0          # assumed: one compare or write per ns (an SRAM-class CAM at 28-45 nm)
    weight_bits: float = 4.0        # assumed: EIE's 4-bit weight indices, so both sides compute the same layer
    act_bits: float = 16.0          # assumed: EIE's 16-bit fixed-point activations (same reason)
    compare_cycles: float = 1.0     # assumed: a compare of every row in one cycle (the AP's defining operation)
    write_cycles: float = 1.0       # assumed: a write of every tagged row in one cycle
    move_cycles_per_bit: float = 1.0  # assumed: moving a bit to the neighbour row over the inter-row network


@dataclass
class EIEParams:
    pes: float = 64.0               # EIE (ISCA 2016) Sec. VI / Table II: 64 PEs
    clock_ghz: float = 0.8          # EIE Sec. VI / Table II: 800 MHz
    peak_gops: float = 102.0        # EIE abstract: "a processing power of 102 GOPS/s working directly on a compressed network"
    load_balance: float = 1.0       # assumed: PEs never wait for each other (EIE's FIFOs hide most imbalance)
    act_density: float = 0.35       # assumed: one density for all six layers (EIE Table III's act% not in a stored copy)


SOURCES = {
    "eie.pes": "Han et al., EIE, ISCA 2016, Sec. VI (64 PEs); 2 x 64 x 0.8 GHz = 102.4 GOPS, the abstract's 102 GOPS",
    "eie.clock_ghz": "EIE Sec. VI (800 MHz); same check",
    "eie.peak_gops": "EIE abstract (paperswithcode.com/paper/eie-efficient-inference-engine-on-compressed)",
}
ASSUMED = ({f"ap.{f.name}" for f in fields(APParams)} | {f"eie.{f.name}" for f in fields(EIEParams)}) - set(SOURCES)


@dataclass(frozen=True)
class Layer:
    """One EIE benchmark layer: y = W x, W of n_out x n_in with ``weight_density`` nonzeros."""
    name: str
    n_in: int
    n_out: int
    weight_density: float


# EIE's AlexNet and VGG-16 benchmark layers (EIE Table III: Alex-6..8, VGG-6..8): the FC layers of
# AlexNet (Krizhevsky et al. 2012: 256x6x6 -> 4096 -> 4096 -> 1000) and VGG-16 (Simonyan & Zisserman
# 2015: 512x7x7 -> 4096 -> 4096 -> 1000), pruned as Han et al. (NIPS 2015, Tables 4 and 5: fc6/fc7/fc8
# keep 9/9/25% of AlexNet's weights and 4/4/23% of VGG-16's), the densities EIE's Table III lists.
# The NeuralTalk layers (NT-We, NT-Wd, NT-LSTM) are left out: their shapes are in no source we read.
EIE_LAYERS = (
    Layer("Alex-6", 9216, 4096, 0.09), Layer("Alex-7", 4096, 4096, 0.09), Layer("Alex-8", 4096, 1000, 0.25),
    Layer("VGG-6", 25088, 4096, 0.04), Layer("VGG-7", 4096, 4096, 0.04), Layer("VGG-8", 4096, 1000, 0.23),
)


def in_place_add_passes() -> int:
    """Passes of an in-place full add B <- A + B (with carry C): one per truth-table row whose
    (sum, carry out) differs from the stored (b, c) it overwrites."""
    passes = 0
    for a, b, c in product((0, 1), repeat=3):
        total = a + b + c
        if (total & 1, total >> 1) != (b, c):
            passes += 1
    return passes


def add_cycles(bits: float, ap: APParams) -> float:
    """An in-place add of ``bits``-bit words in every row at once."""
    return bits * in_place_add_passes() * (ap.compare_cycles + ap.write_cycles)


def multiply_cycles(ap: APParams) -> float:
    """weight x activation in every row: one conditional act_bits add per weight bit."""
    return ap.weight_bits * add_cycles(ap.act_bits, ap)


def reduce_cycles(terms: int, ap: APParams) -> float:
    """Summing ``terms`` contiguous products by a tree: per level a move and an add of the partial
    sums, which grow one bit per level."""
    cycles, width = 0.0, ap.weight_bits + ap.act_bits
    for _ in range(math.ceil(math.log2(terms)) if terms > 1 else 0):
        width += 1
        cycles += width * ap.move_cycles_per_bit + add_cycles(width, ap)
    return cycles


def ap_layer(layer: Layer, ap: APParams, act_density: float) -> dict[str, float]:
    """AIDA's cycles for one layer at batch 1, by phase, and its time in seconds."""
    nnz = layer.n_in * layer.n_out * layer.weight_density
    chunks = math.ceil(nnz / ap.rows)
    broadcast = math.ceil(layer.n_in * act_density) * (ap.compare_cycles + ap.write_cycles)
    multiply = multiply_cycles(ap)
    reduce = reduce_cycles(max(1, round(layer.n_in * layer.weight_density)), ap)
    cycles = chunks * (broadcast + multiply + reduce)
    return dict(ap_chunks=chunks, ap_broadcast_cycles=chunks * broadcast, ap_multiply_cycles=chunks * multiply,
                ap_reduce_cycles=chunks * reduce, ap_cycles=cycles, ap_s=cycles / (ap.clock_ghz * 1e9))


def eie_layer(layer: Layer, eie: EIEParams) -> dict[str, float]:
    """EIE's cycles for one layer at batch 1: the nonzero weights in the nonzero activations' columns
    over its PEs."""
    macs = layer.n_in * layer.n_out * layer.weight_density * eie.act_density
    cycles = math.ceil(macs / (eie.pes * eie.load_balance))
    return dict(eie_macs=macs, eie_cycles=cycles, eie_s=cycles / (eie.clock_ghz * 1e9))


def ap_peak_gops(ap: APParams) -> float:
    """Every row doing one multiply-accumulate (2 operations): a multiply and an add of the product
    into an accumulator of weight + act bits."""
    return 2.0 * ap.rows / (multiply_cycles(ap) + add_cycles(ap.weight_bits + ap.act_bits, ap)) * ap.clock_ghz


def evaluate(ap: APParams, eie: EIEParams, layers=EIE_LAYERS) -> tuple[list[dict], dict[str, float]]:
    """Per layer: both sides' cycles and times and AIDA's speedup; the headlines: peak ratio and the
    geomean throughput ratio over the layers."""
    rows = []
    for layer in layers:
        a, e = ap_layer(layer, ap, eie.act_density), eie_layer(layer, eie)
        rows.append(dict(layer=layer.name, n_in=layer.n_in, n_out=layer.n_out, weight_density=layer.weight_density,
                         act_density=eie.act_density, **a, **e, speedup=e["eie_s"] / a["ap_s"]))
    geomean = math.exp(sum(math.log(r["speedup"]) for r in rows) / len(rows))
    return rows, dict(peak_ratio=ap_peak_gops(ap) / eie.peak_gops, throughput_geomean=geomean,
                      ap_peak_gops=ap_peak_gops(ap), eie_peak_gops_from_config=2.0 * eie.pes * eie.clock_ghz)
