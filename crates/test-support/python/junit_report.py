"""Reads a JUnit XML file with junitparser, as a CI system's reporter would,
and prints what it understood as one JSON object: per suite its counts,
timestamp and hostname, per case its name and result. Exits 1 (with the
reason on stderr) when the file is not a JUnit report it can read."""
import json
import sys

from junitparser import Error, Failure, JUnitXml, Skipped


def main():
    try:
        xml = JUnitXml.fromfile(sys.argv[1])
    except Exception as e:  # the reader's own refusal is the finding
        print(f"not a readable JUnit report: {e}", file=sys.stderr)
        sys.exit(1)
    suites = []
    for suite in xml:
        cases = []
        for case in suite:
            results = case.result
            kind = "passed"
            for result in results:
                if isinstance(result, Failure):
                    kind = "failure"
                elif isinstance(result, Error):
                    kind = "error"
                elif isinstance(result, Skipped):
                    kind = "skipped"
            cases.append({"name": case.name, "classname": case.classname, "result": kind})
        suites.append({
            "name": suite.name,
            "tests": suite.tests,
            "failures": suite.failures,
            "errors": suite.errors,
            "skipped": suite.skipped,
            "timestamp": suite.timestamp,
            "hostname": suite.hostname,
            "cases": cases,
        })
    print(json.dumps({"suites": suites}))


if __name__ == "__main__":
    main()
