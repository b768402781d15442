"""The real services the tests in tests/real run against (tools/*.sh start them; `.ci/run` does).

A test whose service is absent skips, saying which and how to start it; with
``REPRO_REQUIRE_SERVICES=all`` (or a comma list naming it: ``slurm,mlflow,container,chromium``)
it fails instead, so that CI cannot pass by skipping everything it was meant to exercise.
"""

from __future__ import annotations

import os

import pytest

SERVICES = ("slurm", "mlflow", "container", "chromium")


def required(name: str) -> bool:
    """Whether REPRO_REQUIRE_SERVICES asks for the service ``name``."""
    if name not in SERVICES:
        raise ValueError(f"unknown service {name!r} (one of {', '.join(SERVICES)})")
    wanted = {s.strip() for s in os.environ.get("REPRO_REQUIRE_SERVICES", "").split(",") if s.strip()}
    unknown = wanted - {"all", *SERVICES}
    if unknown:
        raise ValueError(f"REPRO_REQUIRE_SERVICES names unknown services {sorted(unknown)} "
                         f"(use all or some of {', '.join(SERVICES)})")
    return "all" in wanted or name in wanted


def absent(name: str, reason: str):
    """Skip the calling test because ``name`` is absent, or fail when it is required."""
    if required(name):
        pytest.fail(f"{name} is required (REPRO_REQUIRE_SERVICES) but absent: {reason}", pytrace=False)
    pytest.skip(f"{name} absent: {reason}")
