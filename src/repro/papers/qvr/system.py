"""Q-VR's parameters: the headset, display, acuity model, server, codec and arms.

Each field is cited in ``SOURCES`` or listed in ``ASSUMED`` (a test checks every field is in exactly
one); ``config/experiment/qvr/traces.yaml`` repeats the same in its comments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from repro.sim.params import ParamError, count, non_negative, positive

ARMS = ("local", "static", "qvr")


@dataclass
class SystemParams:
    width: int = 1440  # display pixels per eye, horizontal
    height: int = 1600  # display pixels per eye, vertical
    fov_deg: float = 110.0  # horizontal field of view per eye, degrees
    refresh_hz: float = 90.0  # display refresh: frames are issued at most this often
    mar0_deg: float = 1.0 / 48  # minimum angle of resolution at the fovea, degrees per cycle
    mar_slope: float = 0.022  # MAR growth per degree of eccentricity
    server_speedup: float = 10.0  # server GPU rendering speed / headset GPU
    encode_gpx_s: float = 1.0  # server video encoder, Gpixels/s
    decode_gpx_s: float = 0.5  # headset video decoder, Gpixels/s
    bits_per_px: float = 0.25  # encoded bits per transmitted pixel
    uca_gpx_s: float = 4.0  # Q-VR's composition + ATW unit on the headset, Gpixels/s
    sw_compose_ms: float = 2.0  # composition + ATW as a shader on the headset GPU, ms per frame
    pose_bytes: int = 512  # uplink pose message
    tracking_display_ms: float = 4.0  # sensor sampling + scan-out, added to every frame's latency
    inflight: int = 2  # frames in flight (the pipeline's depth)
    latency_target_ms: float = 25.0  # the controller's end-to-end latency bound
    static_fovea_deg: float = 20.0  # static collaborative rendering's fixed local eccentricity
    fovea_step_deg: float = 2.5  # the controller's eccentricity grid step
    ewma: float = 0.2  # weight of the newest frame in the controller's bandwidth / latency estimates
    geometry_share_min: float = 0.2  # a partial render's geometry cost at zero area (culling is not free)

    def check(self, key: str = "system") -> "SystemParams":
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("width", "height", "pose_bytes", "inflight"):
                count(f"{key}.{f.name}", v)
            elif f.name in ("tracking_display_ms", "sw_compose_ms", "geometry_share_min"):
                non_negative(f"{key}.{f.name}", v)
            else:
                positive(f"{key}.{f.name}", v)
        if not 0 < self.ewma <= 1:
            raise ParamError(f"{key}.ewma: must be in (0, 1], got {self.ewma!r}")
        return self


SOURCES = {
    "latency_target_ms": "§1, Fig. 1: 'VR system latency restriction (i.e., commercial standard of 25ms)'",
}
ASSUMED = {f.name for f in fields(SystemParams)} - set(SOURCES)
