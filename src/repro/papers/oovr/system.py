"""The NUMA multi-GPU's parameters: what the paper states, and what we assume.

Each field is cited in ``SOURCES`` or listed in ``ASSUMED`` (a test checks that every field is in
exactly one); ``config/experiment/oovr/scenes.yaml`` repeats the same in its comments. Link and
DRAM latencies are not modelled: a GPM keeps enough requests in flight to hide them, so transfers
are priced by bandwidth alone.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from repro.sim.link import TOPOLOGIES
from repro.sim.params import choice, count, non_negative, positive

ARMS = ("afr", "sfr", "object", "oo_app", "oovr")
EARLIER = ("afr", "sfr", "object")  # the earlier multi-GPU distributions OO-VR is compared with


@dataclass
class SystemParams:
    gpms: int = 4  # GPU modules
    link_gbps: float = 64.0  # each directed inter-GPM link, GB/s (inf allowed)
    topology: str = "switch"  # switch: one link per GPM each way into a crossbar; full: a link per GPM pair
    dram_gbps: float = 120.0  # local DRAM per GPM, GB/s (inf allowed)
    tri_rate_g: float = 1.5  # geometry rate per GPM, Gtriangles/s
    frag_rate_g: float = 12.0  # shaded fragments per GPM, Gfragments/s
    cache_mb: float = 1.0  # L2 per GPM holding recently read buffers, MiB
    tex_bytes_per_frag: float = 4.0  # texel bytes fetched from memory per fragment
    fb_bytes_per_frag: float = 8.0  # colour + depth bytes written per fragment
    vtx_bytes_per_tri: float = 32.0  # vertex bytes read per triangle
    compose_bytes_per_px: float = 8.0  # colour + depth per pixel sent for composition
    sw_compose_rate_g: float = 4.0  # software (shader) composition on one GPM, Gpixels/s
    hw_compose_rate_g: float = 16.0  # OO-VR's distributed composition unit per GPM, Gpixels/s
    batches_per_gpm: float = 4.0  # texture-sharing batches are capped at total work / (gpms * this)

    def check(self, key: str = "system") -> "SystemParams":
        count(f"{key}.gpms", self.gpms)
        for f in fields(self):
            if f.name == "topology":
                choice(f"{key}.topology", self.topology, TOPOLOGIES)
            elif f.name != "gpms":
                value = getattr(self, f.name)
                if f.name in ("link_gbps", "dram_gbps"):
                    positive(f"{key}.{f.name}", value, allow_inf=True)
                elif f.name == "cache_mb":
                    non_negative(f"{key}.{f.name}", value)
                else:
                    positive(f"{key}.{f.name}", value)
        return self


SOURCES = {
    "gpms": "§Evaluation and PAPERS.md §C: a NUMA multi-GPU of 4 GPMs",
    "link_gbps": "abstract (ISCA version): 'the limited inter-GPM link bandwidth (e.g., 64GB/s for NVlink)'",
}
ASSUMED = {f.name for f in fields(SystemParams)} - set(SOURCES)
