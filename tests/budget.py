"""The suite's time budget, in the machine's own units: multiples of the main job.

The yardstick is `vit train` (the README's first command) on the same machine
(`calibration.main_job_seconds`: measured by `.ci/run`, else estimated at the start of the run).
A faster or slower machine moves the yardstick and every limit with it, so the same test fails
the guard on every machine.

- The default tier (the README's `pytest`) must finish within `DEFAULT_TIER_RATIO` times the
  main job; each of its tests (its setup, where a fixture it is the first to need is built,
  and its call) within `DEFAULT_TEST_RATIO` times it, times the workers per core where they
  share one (`calibration.worker_share`: 2 under `taskset -c 0 pytest`).
- Each slow-tier test within `SLOW_TEST_RATIO` times it.

A test over its limit fails with a message saying what to do. Time spent building a shared
artifact (`tests/artifacts.py`), or waiting for another worker to build it, is not charged to
the test that asked first. At the end of a tier its wall time is printed as a ratio to the main
job; past `DEFAULT_TIER_RATIO` the line says OVER, in red (a warning: a whole tier's wall time
moves with the machine's load, which must not fail a correct change; the per-test limits, with
their margin, fail).
"""

import time

import pytest

import artifacts
import calibration

DEFAULT_TIER_RATIO = 2.0
DEFAULT_TEST_RATIO = 0.25
SLOW_TEST_RATIO = 5.0
TEST_RATIOS = {"default": DEFAULT_TEST_RATIO, "slow": SLOW_TEST_RATIO}

# Tests allowed over their tier's limit, each with its reason. Keep it short: a default-tier
# test that is slow for its own sake belongs in the slow tier or should share what it builds.
EXCEPTIONS: dict[str, str] = {}


def tier_of(config) -> str | None:
    """'default' for the project's `-m "not slow"`, 'slow' for `-m slow`, else None (a run of
    chosen tests, held to no limit)."""
    expression = " ".join((config.option.markexpr or "").split())
    return {"not slow": "default", "slow": "slow"}.get(expression)


class BudgetGuard:
    """A pytest plugin: fails tests over their tier's limit; prints the tier's ratio."""

    def __init__(self, config):
        self.started = time.monotonic()
        self.tier = tier_of(config)
        self.main_job, self.source = (None, "") if self.tier is None else _yardstick()
        ratio = TEST_RATIOS.get(self.tier)
        # A worker sharing its core with another runs each test that much slower.
        self.limit = ratio * self.main_job * calibration.worker_share(_workers(config)) if \
            ratio and self.main_job else None
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
        if call.when != "call" or self.limit is None:
            return
        building = artifacts.seconds_building - self.building_before.pop(item.nodeid, 0.0)
        spent = self.setup_seconds.pop(item.nodeid, 0.0) + call.duration - building
        if spent > self.limit and item.nodeid not in EXCEPTIONS and report.passed:
            report.outcome = "failed"
            report.longrepr = _over_limit(item.nodeid, spent, building, self)

    def pytest_runtest_logreport(self, report):
        self.totals[report.nodeid] = self.totals.get(report.nodeid, 0.0) + report.duration

    def pytest_terminal_summary(self, terminalreporter):
        if not self.totals or hasattr(terminalreporter.config, "workerinput"):
            return
        slowest = max(self.totals, key=self.totals.get)
        limit = f"; per-test limit {self.limit:.3g} s" if self.limit else ""
        terminalreporter.write_line(
            f"tier total: {len(self.totals)} tests, {sum(self.totals.values()):.0f} s of test "
            f"time in {self._wall():.0f} s wall; slowest {self.totals[slowest]:.1f} s "
            f"({slowest}){limit}")
        if self.main_job:
            terminalreporter.write_line(self._ratio_line(), red=self._over_tier_budget(),
                                        bold=self._over_tier_budget())

    def _wall(self) -> float:
        return time.monotonic() - self.started

    def _over_tier_budget(self) -> bool:
        return self.tier == "default" and bool(self.main_job) and \
            self._wall() > DEFAULT_TIER_RATIO * self.main_job

    def _ratio_line(self) -> str:
        ratio = self._wall() / self.main_job
        line = (f"{self.tier} tier: {self._wall():.0f} s wall = {ratio:.2f}x the main job "
                f"(vit train: {_seconds(self.main_job)} s, {self.source})")
        if self.tier != "default":
            return line
        if not self._over_tier_budget():
            return f"{line}; within its {DEFAULT_TIER_RATIO:g}x"
        return (f"{line}: OVER its {DEFAULT_TIER_RATIO:g}x; the per-test tables "
                "(tools/test_durations.py) say where the time went")


def _workers(config) -> int | None:
    """The controller's `-n` (its own environment has no worker count, and the limit it prints
    must be the workers' own), else None: a worker reads xdist's count."""
    processes = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not isinstance(processes, int):
        return None
    return max(1, processes)


def _yardstick() -> tuple[float, str]:
    """The main job's seconds and how they are known; in an xdist worker, what the controller
    found (the environment it started the workers with)."""
    try:
        return calibration.main_job_seconds()
    except ValueError as error:
        raise pytest.UsageError(str(error))


def _seconds(value: float) -> str:
    """Whole seconds, or two digits under ten (the sample suites of tests/test_budget.py time
    main jobs of a fraction of a second)."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _over_limit(nodeid: str, spent: float, building: float, guard: BudgetGuard) -> str:
    ratio = TEST_RATIOS[guard.tier]
    what_to_do = ("share its artifact (tests/artifacts.py) or mark it slow" if
                  guard.tier == "default" else "hold it to the plumbing and move the quality "
                  "figure to a benchmark check (benchmarks/)")
    return (f"{nodeid} took {spent:.1f} s (setup and call, not counting {building:.1f} s of "
            f"shared artifacts), over the {guard.tier} tier's limit of {guard.limit:.3g} s per "
            f"test ({ratio:g}x the main job's {_seconds(guard.main_job)} s, {guard.source}): "
            f"{what_to_do}; a test that must stay goes in tests/budget.py's EXCEPTIONS with "
            "its reason.")
