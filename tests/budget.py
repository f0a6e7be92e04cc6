"""The default tier's time budget, kept test by test.

The README's `pytest` must finish within 6 minutes on 2 cores. Each test's own time (its setup,
where a fixture it is the first to need is built, and its call) is held under
`VIT_TEST_BUDGET_SECONDS` when that variable is set, as `.ci/run` sets it: a default-tier test
over it fails with a message saying what to do. Time spent building a shared artifact
(`tests/artifacts.py`), or waiting for another worker to build it, is not charged to the test
that asked first. The slow tier (`pytest -m slow`) has no per-test limit.

At the end of any run the tier's total test time, its wall time and its slowest test are
printed, so that a run shows where it stands against the budget.
"""

import os
import time

import pytest

import artifacts

BUDGET_VARIABLE = "VIT_TEST_BUDGET_SECONDS"

# Default-tier tests allowed over the limit, each with its reason. Keep it short: a test that
# is slow for its own sake belongs in the slow tier or should share what it builds.
EXCEPTIONS: dict[str, str] = {}


def limit_seconds() -> float | None:
    """The per-test limit in seconds, or None when no limit is set."""
    value = os.environ.get(BUDGET_VARIABLE, "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise pytest.UsageError(f"{BUDGET_VARIABLE} must be a number of seconds, got {value!r}")
    if seconds <= 0:
        raise pytest.UsageError(f"{BUDGET_VARIABLE} must be positive, got {value!r}")
    return seconds


def _is_default_tier(config) -> bool:
    """Whether this run is the default tier: the project's `-m "not slow"`."""
    return " ".join((config.option.markexpr or "").split()) == "not slow"


class BudgetGuard:
    """A pytest plugin: fails default-tier tests over the limit; prints the tier's totals."""

    def __init__(self, config):
        self.limit = limit_seconds() if _is_default_tier(config) else None
        self.started = time.monotonic()
        self.setup_seconds: dict[str, float] = {}
        self.building_before: dict[str, float] = {}
        self.totals: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item):
        self.building_before[item.nodeid] = artifacts.seconds_building
        yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "setup":
            self.setup_seconds[item.nodeid] = call.duration
            return
        if call.when != "call" or self.limit is None or item.get_closest_marker("slow"):
            return
        building = artifacts.seconds_building - self.building_before.pop(item.nodeid, 0.0)
        spent = self.setup_seconds.pop(item.nodeid, 0.0) + call.duration - building
        if spent > self.limit and item.nodeid not in EXCEPTIONS and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} took {spent:.1f} s (setup and call, not counting "
                f"{building:.1f} s of shared artifacts), over the default tier's "
                f"limit of {self.limit:g} s per test ({BUDGET_VARIABLE}): share its artifact "
                "(tests/artifacts.py) or mark it slow; a test that must stay in the default tier "
                "goes in tests/budget.py's EXCEPTIONS with its reason.")

    def pytest_runtest_logreport(self, report):
        self.totals[report.nodeid] = self.totals.get(report.nodeid, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter):
        if not self.totals or hasattr(terminalreporter.config, "workerinput"):
            return
        slowest = max(self.totals, key=self.totals.get)
        limit = f"; per-test limit {self.limit:g} s" if self.limit else ""
        terminalreporter.write_line(
            f"tier total: {len(self.totals)} tests, {sum(self.totals.values()):.0f} s of test "
            f"time in {time.monotonic() - self.started:.0f} s wall; slowest "
            f"{self.totals[slowest]:.1f} s ({slowest}){limit}")

