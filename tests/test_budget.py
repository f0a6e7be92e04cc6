"""The time guard (tests/budget.py), in multiples of the main job: a default-tier test over
its share of the main job fails with a message saying what to do, whether its own call or its
fixture took the time; a slow-tier test over five main jobs fails too; listed exceptions, the
build of a shared artifact and runs of chosen tests pass; every tier prints its wall time as a
ratio to the main job, and a default tier over twice the main job says so (the main job measured
by .ci/run or estimated by tests/calibration.py)."""

import os
import subprocess
import sys
import textwrap

import pytest

import budget
import calibration

TESTS = os.path.dirname(os.path.abspath(__file__))

CONFTEST = """
import budget

budget.EXCEPTIONS["test_sample.py::test_slow_but_excused"] = "a reason"


def pytest_configure(config):
    config.pluginmanager.register(budget.BudgetGuard(config), "vit-budget-guard")
"""

SAMPLE = """
import time

import pytest


@pytest.fixture
def slow_fixture():
    time.sleep(0.15)


def test_fast():
    pass


def test_too_slow():
    time.sleep(0.15)


def test_too_slow_in_its_fixture(slow_fixture):
    pass


def test_slow_but_excused():
    time.sleep(0.15)


def test_slow_only_in_building_a_shared_artifact():
    import artifacts

    artifacts.shared("sample", {}, lambda folder: time.sleep(0.15))


@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.15)
"""


# Quick tests whose sum passes twice a main job of 0.5 s.
MANY_QUICK = """
import time

import pytest


@pytest.mark.parametrize("index", range(12))
def test_quick(index):
    time.sleep(0.1)
"""


def _pytest(folder, marks, main_job, source="measured: by the test"):
    env = dict(os.environ, PYTHONPATH=TESTS, VIT_TEST_ARTIFACTS=str(folder / "artifacts"))
    # The sample runs without workers: this worker's count (which doubles every limit when
    # both workers share one core, under `taskset -c 0 pytest`) is not the sample's.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(name, None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the guard is all the sample needs
    env[calibration.SECONDS_VARIABLE] = main_job
    env[calibration.SOURCE_VARIABLE] = source
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-o",
         "addopts=", "-o", "markers=slow: long", "-m", marks, "-rA", str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _sample(tmp_path, tests=SAMPLE):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(tests))
    return tmp_path


def test_a_slow_default_tier_test_fails_the_guard_with_what_to_do(tmp_path):
    done = _pytest(_sample(tmp_path), "not slow", main_job="0.4")   # a 0.1 s limit
    output = done.stdout
    assert done.returncode == 1, output
    assert "FAILED test_sample.py::test_too_slow " in output
    assert "FAILED test_sample.py::test_too_slow_in_its_fixture" in output
    assert ("over the default tier's limit of 0.1 s per test (0.25x the main job's 0.4 s, "
            "measured: by the test)") in output
    assert "share its artifact (tests/artifacts.py) or mark it slow" in output
    assert "PASSED test_sample.py::test_fast" in output
    assert "PASSED test_sample.py::test_slow_but_excused" in output
    assert "PASSED test_sample.py::test_slow_only_in_building_a_shared_artifact" in output
    assert "tier total: 5 tests" in output
    assert "x the main job (vit train: 0.4 s, measured: by the test)" in output


def test_the_limits_follow_the_main_job(tmp_path):
    """The same tests on a machine ten times slower: nothing is over its share."""
    done = _pytest(_sample(tmp_path), "not slow", main_job="10")
    assert done.returncode == 0 and "5 passed" in done.stdout, done.stdout
    assert "within its 2x" in done.stdout


def test_a_slow_tier_test_over_five_main_jobs_fails(tmp_path):
    folder = _sample(tmp_path)
    over = _pytest(folder, "slow", main_job="0.024")   # a 0.12 s limit
    assert over.returncode == 1, over.stdout
    assert "over the slow tier's limit of 0.12 s per test (5x the main job's" in over.stdout
    assert "move the quality figure to a benchmark check" in over.stdout
    within = _pytest(folder, "slow", main_job="1")
    assert within.returncode == 0 and "1 passed" in within.stdout, within.stdout
    assert "slow tier: " in within.stdout


def test_chosen_tests_are_held_to_no_limit(tmp_path):
    done = _pytest(_sample(tmp_path), "not slow or slow", main_job="0.01")
    assert done.returncode == 0 and "6 passed" in done.stdout, done.stdout
    assert "tier total: 6 tests" in done.stdout and "x the main job" not in done.stdout


@pytest.mark.parametrize("source", ["measured: by the test", "estimated: by the test"])
def test_a_default_tier_over_twice_the_main_job_is_flagged(tmp_path, source):
    """Its ratio line says OVER (a warning: each test held to its share still passes)."""
    done = _pytest(_sample(tmp_path, MANY_QUICK), "not slow", main_job="0.5", source=source)
    assert done.returncode == 0, done.stdout
    assert "12 passed" in done.stdout and "OVER its 2x" in done.stdout


def test_a_bad_main_job_time_is_named(tmp_path):
    done = _pytest(_sample(tmp_path), "not slow", main_job="fast")
    assert done.returncode != 0
    assert ("VIT_MAIN_JOB_SECONDS must be the main job's wall time in seconds (a positive "
            "number), got 'fast'") in done.stdout + done.stderr


def test_the_calibration_estimates_the_main_job_and_shares_it(monkeypatch):
    """Without a measured time, a slice of the main job's training is timed and scaled; the
    estimate goes into the environment for the workers and the processes tests start."""
    monkeypatch.delenv(calibration.SECONDS_VARIABLE, raising=False)
    monkeypatch.delenv(calibration.SOURCE_VARIABLE, raising=False)
    monkeypatch.setattr(calibration, "ROUNDS", 2)  # the sharing, not the steadiness, is tested
    seconds, source = calibration.main_job_seconds()
    assert 5 < seconds < 5000
    assert source.startswith("estimated from 2 rounds of 40 forward steps of its model")
    assert os.environ[calibration.SECONDS_VARIABLE] == f"{seconds:.1f}"
    assert calibration.main_job_seconds() == (float(f"{seconds:.1f}"), source)
    assert budget.DEFAULT_TEST_RATIO < budget.DEFAULT_TIER_RATIO < budget.SLOW_TEST_RATIO
