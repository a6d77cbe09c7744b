#!/usr/bin/env python3
"""Lists the tests that the last `make test` run of ctest in each BUILD_DIR did
not run (a test exiting 77, SKIP_RETURN_CODE; a disabled one), with their
labels. With --only LABEL (repeatable), exits 1 when a test with none of
those labels is among them: CI (.ci/run) lets only the gpu tests skip (no
GPU on the CI machine) and the route tests of a cpu products' route the cpu
cannot run (tests/route.h says which and why), since a skip on a machine
without the tests' tools would otherwise read as a pass.

usage: skipped.py [--only LABEL]... BUILD_DIR...

Reads BUILD_DIR/ctest-junit.xml, which the Makefile has ctest write
(--output-junit): ctest's own log records a skipped test as passed, and its
console summary is meant for people. The labels come from
`ctest --show-only=json-v1`. Standard library only: it runs on the system
python3, before or without the project's venv.
"""
import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

JUNIT = "ctest-junit.xml"


def labels_by_test(build_dir):
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    labels = {}
    for test in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        labels[test["name"]] = props.get("LABELS", [])
    return labels


def not_run(build_dir):
    """(name, reason) of each test of the last run that did not run."""
    for case in ET.parse(f"{build_dir}/{JUNIT}").getroot().iter("testcase"):
        if case.get("status") != "run":
            # The test's own reason: the last line it printed ("skipped: ...").
            out = (case.findtext("system-out") or "").strip().splitlines()
            skipped = case.find("skipped")
            why = skipped.get("message", "") if skipped is not None else case.get("status")
            yield case.get("name"), out[-1] if out else why


def main():
    ap = argparse.ArgumentParser(description="Lists the tests the last ctest run of make test did not run.")
    ap.add_argument("--only", metavar="LABEL", action="append",
                    help="exit 1 when a test with none of these labels did not run")
    ap.add_argument("build_dirs", nargs="+", metavar="BUILD_DIR")
    args = ap.parse_args()
    bad = 0
    for build_dir in args.build_dirs:
        labels = labels_by_test(build_dir)
        skipped = list(not_run(build_dir))
        for name, reason in skipped:
            tags = labels.get(name, [])
            refused = args.only is not None and not set(args.only) & set(tags)
            bad += refused
            print(f"skipped in {build_dir}: {name} [{','.join(tags)}] ({reason})"
                  + (f": only {'/'.join(args.only)} tests may skip" if refused else ""))
        if not skipped:
            print(f"{build_dir}: every test ran")
    if bad:
        print(f"{bad} test(s) skipped outside the {'/'.join(args.only)} labels: run deploy/install-deps.sh, "
              "or make the test run here", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
