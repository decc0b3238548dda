"""Shared pytest configuration: options for the long runs, and store fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
settings.register_profile("ci", parent=settings.get_profile("default"), derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="run the long soak, crash and fault runs")
    parser.addoption("--kills", type=int, default=None, help="SIGKILL crash test: number of kills")
    parser.addoption("--minutes", type=float, default=None, help="soak test: minutes to run")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="long run: use --slow")
    for item in items:
        # The marker, not `"slow" in item.keywords`: keywords hold the names of the item's parents too, so a
        # checkout in a directory named "slow" would skip every test.
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


@pytest.fixture
def db_path() -> Iterator[str]:
    """A path for a new store, in RAM where possible: a real filesystem whose fsyncs cost nothing,
    since store tests fsync hundreds of times (a power loss is simulated by tests/faultfs.py instead)."""
    from storeutil import fast_tmp_dir

    with fast_tmp_dir() as d:
        yield os.path.join(d, "db")
