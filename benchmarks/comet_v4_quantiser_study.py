# One-off, run as committed (2 CPU cores, 2026-12-06) on /tmp/comet4/acts.npz: the 64 activations of
# benchmarks/comet_v4_ratio.py:activations (np.savez of them, keys t<i>_<layer>); output quoted in docs/gpu-notes.md.
"""How much of SZ3's lead at large eb is the quantiser: v4's entropy stage (Huffman, length-limited, runs,
better mode per tensor; sizes from histograms) over (a) v4's sign-preserving codes and (b) SZ-style
round-to-nearest codes q = rint(x / (2 eb)) (values under eb become 0: ReLU's mask would not survive)."""
import sys
import numpy as np
import pandas as pd
from repro.papers.comet import codec, codec_v4 as V4
d = np.load("/tmp/comet4/acts.npz")
ref = pd.read_csv("results/reference/nvidia-h100-80gb-hbm3/comet/comet_sz3/sz3.csv")

def huff_bytes(q, nb):
    best = float("inf")
    for mode in V4.MODES:
        dq = np.diff(q, axis=1, prepend=0).astype(np.int32) if mode == V4.DELTA else q
        z = codec.zigzag(dq)
        s = V4.symbols(z, (z != 0).any(axis=1))
        h = V4.histogram(s)
        bits = V4.payload_bits(h, V4.book_lengths(h))
        best = min(best, 4 * (nb + 1) + V4.HEADER_BYTES + bits / 8 + 2 * int((z != 0).any(axis=1).sum()))  # ~16 bits padding per block
    return best

for eb in [float(a) for a in sys.argv[1:]]:
    raw = ours = rtn = sz3 = 0
    for i, k in enumerate(sorted(d.files)):
        a = d[k]; raw += a.nbytes
        blocks = codec._blocks(a.reshape(-1))
        q, ok = codec.quantize(blocks, np.float32(eb))
        assert ok.all()
        ours += huff_bytes(q, blocks.shape[0])
        rtn += huff_bytes(np.rint(blocks / np.float32(2 * eb)).astype(np.int32), blocks.shape[0])
        sz3 += int(ref[(ref.tensor == i) & np.isclose(ref.eb, eb)].sz3_bytes.iloc[0])
    print(f"eb {eb}: sign-preserving {raw/ours:.2f}x ({sz3/ours:.3f} of SZ3), round-to-nearest {raw/rtn:.2f}x ({sz3/rtn:.3f} of SZ3), SZ3 {raw/sz3:.2f}x", flush=True)
