"""A SimPy Environment that counts the events it processes (the simulated-events/s benchmark), the
rate a run reports, and a map over independent simulations in worker processes."""

from __future__ import annotations

import math

import simpy


def simulation_speed(events: float, wall_s: float, log, label: str) -> dict[str, float]:
    """The metrics every simulator experiment reports about its own speed: simulated events, wall
    seconds and events per second (also logged and printed, so a run's output shows it)."""
    rate = events / wall_s if wall_s > 0 else math.nan
    log.info("simulated %d events in %.1f s: %.0f events/s", events, wall_s, rate)
    print(f"{label}: {events:.0f} simulated events in {wall_s:.1f} s = {rate:,.0f} events/s", flush=True)
    return {"events": events, "events_per_s": rate, "wall_s": wall_s}


class CountingEnvironment(simpy.Environment):
    """``simpy.Environment`` plus ``events``: how many events ``step`` has processed."""

    def __init__(self, initial_time: float = 0):
        super().__init__(initial_time)
        self.events = 0

    def step(self) -> None:
        super().step()
        self.events += 1


class pool_map:
    """``with pool_map(n) as mapper``: a process pool's ``map`` for n > 1, the builtin ``map`` otherwise."""

    def __init__(self, workers: int):
        self.workers, self.executor = workers, None

    def __enter__(self):
        if self.workers > 1:
            from concurrent.futures import ProcessPoolExecutor

            self.executor = ProcessPoolExecutor(self.workers)
            return self.executor.map
        return map

    def __exit__(self, *exc):
        if self.executor:
            self.executor.shutdown()
