"""REPRO_REQUIRE_SERVICES turns a missing service from a skip into a failure."""

import pytest
from _pytest.outcomes import Failed, Skipped

import real_services


@pytest.mark.parametrize("value, skips", [("", True), ("mlflow", True), ("slurm", False), ("all", False)])
def test_absent_skips_unless_required(monkeypatch, value, skips):
    monkeypatch.setenv("REPRO_REQUIRE_SERVICES", value)
    with pytest.raises(Skipped if skips else Failed, match="no cluster"):
        real_services.absent("slurm", "no cluster")


def test_unknown_service_name_is_an_error(monkeypatch):
    monkeypatch.setenv("REPRO_REQUIRE_SERVICES", "slurm,postgres")
    with pytest.raises(ValueError, match="postgres"):
        real_services.required("slurm")
