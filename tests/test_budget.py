"""The default tier's time guard (tests/budget.py): a default-tier test over the limit fails
with a message saying what to do, whether its own call or its fixture took the time; slow
tests, listed exceptions, the build of a shared artifact and runs without a limit pass; every
run prints its tier's total."""

import os
import subprocess
import sys
import textwrap

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
    time.sleep(0.3)


def test_fast():
    pass


def test_too_slow():
    time.sleep(0.3)


def test_too_slow_in_its_fixture(slow_fixture):
    pass


def test_slow_but_excused():
    time.sleep(0.3)


def test_slow_only_in_building_a_shared_artifact():
    import artifacts

    artifacts.shared("sample", {}, lambda folder: time.sleep(0.3))


@pytest.mark.slow
def test_marked_slow():
    time.sleep(0.3)
"""


def _pytest(folder, marks, limit):
    env = dict(os.environ, PYTHONPATH=TESTS, VIT_TEST_ARTIFACTS=str(folder / "artifacts"))
    env.pop("VIT_TEST_BUDGET_SECONDS", None)
    if limit is not None:
        env["VIT_TEST_BUDGET_SECONDS"] = limit
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-o",
         "addopts=", "-o", "markers=slow: long", "-m", marks, "-rA", str(folder)],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _sample(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    return tmp_path


def test_a_slow_default_tier_test_fails_the_guard_with_what_to_do(tmp_path):
    done = _pytest(_sample(tmp_path), "not slow", limit="0.15")
    output = done.stdout
    assert done.returncode == 1, output
    assert "FAILED test_sample.py::test_too_slow " in output
    assert "FAILED test_sample.py::test_too_slow_in_its_fixture" in output
    assert "share its artifact (tests/artifacts.py) or mark it slow" in output
    assert "PASSED test_sample.py::test_fast" in output
    assert "PASSED test_sample.py::test_slow_but_excused" in output
    assert "PASSED test_sample.py::test_slow_only_in_building_a_shared_artifact" in output
    assert "tier total: 5 tests" in output and "per-test limit 0.15 s" in output


def test_the_slow_tier_and_a_run_without_a_limit_are_not_held(tmp_path):
    folder = _sample(tmp_path)
    slow = _pytest(folder, "slow", limit="0.15")
    assert slow.returncode == 0 and "1 passed" in slow.stdout, slow.stdout
    unlimited = _pytest(folder, "not slow", limit=None)
    assert unlimited.returncode == 0 and "5 passed" in unlimited.stdout, unlimited.stdout
    assert "tier total: 5 tests" in unlimited.stdout


def test_a_bad_limit_is_named(tmp_path):
    done = _pytest(_sample(tmp_path), "not slow", limit="fast")
    assert done.returncode != 0
    assert "VIT_TEST_BUDGET_SECONDS must be a number of seconds, got 'fast'" in (
        done.stdout + done.stderr)
