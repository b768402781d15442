"""A SimPy Environment that counts the events it processes (the simulated-events/s benchmark), and
a map over independent simulations in worker processes."""

from __future__ import annotations

import simpy


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
