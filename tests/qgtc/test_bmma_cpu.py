"""The b1 MMA kernel's host side without a GPU: the variants it may launch are the ones the .cu
instantiates, and the variant choice fills the card."""

from __future__ import annotations

import re
from pathlib import Path

from repro.papers.qgtc import bmma


def test_variants_match_the_instantiations_in_the_source():
    src = (Path(bmma.__file__).parent / "kernels" / "qgtc_bmma.cu").read_text()
    made = {(int(nt), int(ks)) for nt, ks in re.findall(r"^QGTC_BMMA\((\d+), (\d+)\)$", src, re.M)}
    assert made == set(bmma.VARIANTS) and len(bmma.VARIANTS) == 12
    assert 'extern "C" __global__ void qgtc_b1_peak' in src


def test_choice_of_variant():
    # the GEMM claim's shape on 132 SMs: 256 row tiles, 8 n tiles -> NT 8, k split over 4 warps
    assert bmma.choose(256, 8, 16, 132) == (8, 4)
    assert bmma.choose(256, 8, 2, 132) == (8, 1)  # too few k tiles to split
    assert bmma.choose(10_000, 2, 64, 132) == (2, 1)  # enough warps already
    assert bmma.choose(4, 1, 64, 132)[0] == 1
    for args in [(1, 1, 1, 1), (256, 8, 16, 132), (64, 3, 9, 16)]:
        assert bmma.choose(*args) in bmma.VARIANTS
