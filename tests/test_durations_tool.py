"""tools/test_durations.py: the per-test tables `.ci/run` writes from pytest's JUnit XML."""

import pytest
from helpers import script_module

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.test_model" name="test_fit_lowers_loss" time="4.5"/>
<testcase classname="tests.reliability.test_preemption" name="test_a[x-1]" time="10.0"/>
<testcase classname="tests.test_model.TestThings" name="test_b" time="0.5">
  <failure message="boom"/></testcase>
<testcase classname="tests.test_model" name="test_skipped" time="0.0">
  <skipped message="no torch"/></testcase>
</testsuite></testsuites>
"""


def test_tables_name_each_test_its_file_and_the_tier_totals(tmp_path):
    tool = script_module("tools", "test_durations")
    (tmp_path / "default.xml").write_text(REPORT)
    output = tmp_path / "durations.md"
    assert tool.main([f"default={tmp_path / 'default.xml'}", "--output", str(output),
                      "--note", "commit abc, 2 cores"]) == 0
    text = output.read_text()
    assert "commit abc, 2 cores" in text
    assert "4 tests (1 failed, 2 passed, 1 skipped), 15 s of test time." in text
    rows = [line for line in text.splitlines() if line.startswith("| 10.0 ")]
    assert rows[0] == "| 10.0 | 66.7% | `tests/reliability/test_preemption.py::test_a[x-1]` |"
    assert "| 0.5 | 3.3% | `tests/test_model.py::TestThings::test_b` failed |" in text
    assert "| 5.0 | 3 | `tests/test_model.py` |" in text


def test_a_bad_argument_or_report_is_named(tmp_path, capsys):
    tool = script_module("tools", "test_durations")
    with pytest.raises(SystemExit):
        tool.main(["default.xml"])
    assert "expected TIER=REPORT.xml" in capsys.readouterr().err
    (tmp_path / "broken.xml").write_text("<testsuites><testcase")
    with pytest.raises(SystemExit, match="not a readable JUnit XML report"):
        tool.main([f"slow={tmp_path / 'broken.xml'}"])
