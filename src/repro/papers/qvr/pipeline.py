"""One arm on one game and network, as SimPy processes: frames through headset, network, server.

Frames are issued at most once per display refresh, with at most ``inflight`` frames in the
pipeline, and only when the headset GPU is free (the pose is sampled when rendering can start,
so no frame queues behind its predecessor's local work). A frame's remote branch sends the pose
up, holds the server GPU and encoder, crosses the network (bandwidth trace, latency, jitter,
drops) and holds the headset's decoder, while its local branch holds the headset GPU;
composition waits for both and runs on Q-VR's composition unit (``qvr``) or as a shader on the
headset GPU (``local``, ``static``).
Latency per frame = completion - issue + tracking/scan-out; FPS = frames completed / duration.

- ``local``: the whole view at full resolution on the headset GPU.
- ``static``: a fixed fovea (``static_fovea_deg``) local, the rest remote at full resolution.
- ``qvr``: the controller picks fovea size and periphery scale per frame; the periphery is
  rendered at acuity-matched resolution (times the scale).
"""

from __future__ import annotations

import simpy

from repro.papers.qvr.controller import Controller, costs
from repro.papers.qvr.foveation import Layers
from repro.papers.qvr.system import ARMS, SystemParams
from repro.papers.qvr.workload import GameSpec, frame_factors
from repro.sim.compositor import Compositor
from repro.sim.engine import CountingEnvironment
from repro.sim.network import BandwidthTrace, Network, NetworkProfile
from repro.sim.params import choice
from repro.sim.server import Server


def simulate(arm: str, game: GameSpec, profile: NetworkProfile, trace: BandwidthTrace, s: SystemParams,
             layers: Layers, duration_s: float, seed: int, game_seed: int) -> tuple[list[dict], int]:
    """(one dict per completed frame, simulated events). ``seed`` drives the network's jitter and
    drops, ``game_seed`` the frame costs (the same for every network, so arms compare paired)."""
    choice("arm", arm, ARMS)
    env = CountingEnvironment()
    gpu = simpy.PriorityResource(env, capacity=1)  # composition (priority 0) goes before queued renders
    decoder = simpy.Resource(env, capacity=1)
    slots = simpy.Resource(env, capacity=s.inflight)
    server, uca = Server(env), Compositor(env, name="uca")
    net = Network(env, profile, trace, seed=seed)
    c = costs(layers, s, game.geometry_ms, game.pixel_ms, full_periphery=(arm == "static"))
    all_local = len(layers.e1) - 1
    static_i = layers.index(s.static_fovea_deg)
    ctl = Controller(s, trace.at(0.0), (profile.latency_ms + profile.jitter_ms) / 1e3)
    uca_s = layers.display_px / (s.uca_gpx_s * 1e9)
    sw_s = s.sw_compose_ms / 1e3
    factors = frame_factors(game, int(duration_s * s.refresh_hz) + 2, game_seed)
    frames: list[dict] = []

    def hold(resource, seconds, priority=None):
        with (resource.request() if priority is None else resource.request(priority=priority)) as req:
            yield req
            yield env.timeout(seconds)

    def remote(i, scale, f):
        nbytes = c.periphery_bytes[i] * scale
        yield from net.one_way()
        yield from server.render((c.server_geometry[i] + (c.server[i] - c.server_geometry[i]) * scale) * f)
        yield from server.encode(c.encode[i] * scale)
        t_send = env.now
        on_wire = yield from net.send(nbytes)
        ctl.observe(nbytes, on_wire, env.now - t_send - on_wire)
        yield from hold(decoder, c.decode[i] * scale)

    def finish(n, slot, t0, i, scale, parts):
        if arm == "qvr":
            yield from uca.compose(parts, uca_s)
        elif arm == "static":
            yield simpy.AllOf(env, parts)
            yield from hold(gpu, sw_s, priority=0)
        else:  # local: composition is part of the frame's own GPU work
            yield simpy.AllOf(env, parts)
        slots.release(slot)
        frames.append({"frame": n, "issue_s": t0, "latency_ms": (env.now - t0) * 1e3 + s.tracking_display_ms,
                       "fovea_deg": float(layers.e1[i]), "scale": scale,
                       "quality": layers.quality(i, scale) if arm == "qvr" else 1.0,
                       "bytes": float(c.periphery_bytes[i] * scale)})

    def issuer():
        n, period, last = 0, 1.0 / s.refresh_hz, -1.0
        while True:
            slot = slots.request()
            yield slot
            wait = last + period - env.now
            if wait > 0:
                yield env.timeout(wait)
            last = t0 = env.now
            if arm == "local":
                i, scale = all_local, 1.0
            elif arm == "static":
                i, scale = static_i, 1.0
            else:
                i, scale = ctl.choose(c, uca_s)
            parts = [env.process(remote(i, scale, factors[n]))] if c.periphery_bytes[i] > 0 else []
            local = env.process(hold(gpu, c.local[i] * factors[n] + (sw_s if arm == "local" else 0.0), priority=1))
            env.process(finish(n, slot, t0, i, scale, parts + [local]))
            yield local  # the next frame starts when the GPU is free
            n += 1

    env.process(issuer())
    env.run(until=duration_s)
    return frames, env.events
