"""Per-test time tables from pytest's JUnit XML reports, one per tier.

    python tools/test_durations.py default=reports/default.xml slow=reports/slow.xml \\
        [--top 40] [--output durations.md] [--note "which commit, machine, wall times"]

`.ci/run` writes both reports (`--junitxml`); each test's time there is its setup, call and
teardown together, so a fixture built for it counts where it is built. The table gives each
tier's test count, total test time and slowest tests, then the time per test file.
"""

import argparse
import collections
import os
import sys
import tempfile
import xml.etree.ElementTree as ElementTree


def read_report(path: str) -> list[dict]:
    """[{'test': 'tests/x.py::test_y[param]', 'file': 'tests/x.py', 'seconds': float,
    'outcome': 'passed' | 'failed' | 'error' | 'skipped'}, ...] from a JUnit XML file."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        raise SystemExit(f"{path}: not a readable JUnit XML report ({error})")
    rows = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        module = classname.split(".")
        # pytest writes 'tests.reliability.test_x' or 'tests.test_x.TestClass'
        parts = [part for part in module if part]
        file_parts, rest = [], []
        for index, part in enumerate(parts):
            file_parts.append(part)
            if part.startswith("test_"):
                rest = parts[index + 1:]
                break
        file = "/".join(file_parts) + ".py"
        test = "::".join([file, *rest, name])
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
        rows.append({"test": test, "file": file, "seconds": float(case.get("time", 0)),
                     "outcome": outcome})
    return rows


def tier_table(tier: str, rows: list[dict], top: int) -> list[str]:
    """Markdown lines: the tier's totals, its `top` slowest tests and its time per file."""
    total = sum(row["seconds"] for row in rows)
    counts = collections.Counter(row["outcome"] for row in rows)
    lines = [f"## {tier} tier", "",
             f"{len(rows)} tests ({', '.join(f'{n} {k}' for k, n in sorted(counts.items()))}), "
             f"{total:.0f} s of test time.", "",
             "| seconds | share | test |", "|---:|---:|---|"]
    for row in sorted(rows, key=lambda row: -row["seconds"])[:top]:
        lines.append(f"| {row['seconds']:.1f} | {100 * row['seconds'] / max(total, 1e-9):.1f}% "
                     f"| `{row['test']}`{'' if row['outcome'] == 'passed' else ' ' + row['outcome']} |")
    per_file = collections.defaultdict(lambda: [0.0, 0])
    for row in rows:
        per_file[row["file"]][0] += row["seconds"]
        per_file[row["file"]][1] += 1
    lines += ["", "| seconds | tests | file |", "|---:|---:|---|"]
    for file, (seconds, count) in sorted(per_file.items(), key=lambda item: -item[1][0]):
        lines.append(f"| {seconds:.1f} | {count} | `{file}` |")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", metavar="TIER=REPORT.xml")
    parser.add_argument("--top", type=int, default=40, help="slowest tests listed per tier")
    parser.add_argument("--output", help="write the tables here (default: print them)")
    parser.add_argument("--note", default="", help="a line under the title: which commit, "
                        "which machine, the wall times")
    args = parser.parse_args(argv)
    lines = ["# Test durations", ""] + ([args.note, ""] if args.note else [])
    for spec in args.reports:
        tier, separator, path = spec.partition("=")
        if not separator or not tier or not path:
            parser.error(f"expected TIER=REPORT.xml (e.g. default=default.xml), got {spec!r}")
        lines += tier_table(tier, read_report(path), args.top)
    text = "\n".join(lines)
    if not args.output:
        sys.stdout.write(text)
        return 0
    folder = os.path.dirname(os.path.abspath(args.output))
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as file:
        file.write(text)
    os.replace(file.name, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
