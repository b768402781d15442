"""Memory access counts from ZigZag (zigzag-dse, KU Leuven's maintained design-space tool): one
layer on one accelerator description, the mapping ZigZag's temporal-mapping search picks, and the
accesses of every operand at every level of the memory hierarchy, innermost first."""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

DIRECTIONS = ("rd_out_to_low", "wr_in_by_low", "rd_out_to_high", "wr_in_by_high")


def bundled(kind: str, name: str) -> str:
    """A hardware or mapping description ZigZag ships (zigzag/inputs/<kind>/<name>.yaml)."""
    import zigzag

    path = Path(os.path.dirname(zigzag.__file__)) / "inputs" / kind / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(f"{kind}: ZigZag ships no {name!r}; it ships {', '.join(known)}")
    return str(path)


def gemm(m: int, k: int, n: int, bits: int = 8) -> dict:
    """O[m][n] += I[m][k] * W[k][n] in ZigZag's workload form."""
    return {"id": 0, "operator_type": "Gemm", "equation": "O[b][n]+=I[b][k]*W[k][n]", "loop_dims": ["B", "K", "N"],
            "loop_sizes": [m, k, n], "operand_precision": {"W": bits, "I": bits, "O": 2 * bits, "O_final": bits},
            "operand_source": {"I": 0}}


def conv(k: int, c: int, oy: int, ox: int, fy: int, fx: int, bits: int = 8) -> dict:
    """A stride-1 convolution, batch 1, in ZigZag's workload form."""
    return {"id": 0, "operator_type": "Conv", "equation": "O[b][k][oy][ox]+=W[k][c][fy][fx]*I[b][c][iy][ix]",
            "dimension_relations": ["ix=1*ox+1*fx", "iy=1*oy+1*fy"], "loop_dims": ["B", "K", "C", "OY", "OX", "FY", "FX"],
            "loop_sizes": [1, k, c, oy, ox, fy, fx],
            "operand_precision": {"W": bits, "I": bits, "O": 2 * bits, "O_final": bits}, "operand_source": {"I": 0}}


@contextmanager
def _quiet():
    """ZigZag logs every mapping it tries at INFO; keep warnings and errors."""
    before = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(before)


def accesses(layer: dict, hardware: str, mapping: str, out_dir: Path) -> tuple[list[dict], dict[str, float]]:
    """ZigZag's best-energy mapping of ``layer`` on ``hardware`` (bundled names): one row per
    (operand, memory level) with the level's name, its depth from the top (0 = outermost, the
    DRAM), its size and the word accesses in each direction; and the layer's energy (pJ) and
    latency (cycles)."""
    from zigzag.api import get_hardware_performance_zigzag

    with _quiet():
        energy, latency, cmes = get_hardware_performance_zigzag(
            [layer], bundled("hardware", hardware), bundled("mapping", mapping), opt="energy",
            dump_folder=str(out_dir), loma_show_progress_bar=False)
    cme = cmes[0][1][0][0]
    rows = []
    for operand, levels in cme.memory_word_access.items():
        memories = cme.mem_hierarchy_dict[cme.memory_operand_links.layer_to_mem_op(operand)]
        for i, (memory, acc) in enumerate(zip(memories, levels)):
            rows.append(dict(operand=str(operand), level=memory.name, depth=len(levels) - 1 - i,
                             size_bits=int(memory.memory_instance.size),
                             **{d: int(acc.data[d]) for d in DIRECTIONS}))
    return rows, {"energy_pj": float(energy), "latency_cycles": float(latency)}


def global_buffer(rows: list[dict]) -> str:
    """The global buffer: the largest on-chip memory (depth >= 1) of the hierarchy."""
    return max((r for r in rows if r["depth"] >= 1), key=lambda r: r["size_bits"])["level"]
