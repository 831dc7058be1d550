"""Run issue 8's bad-input campaign and print it as a Markdown table.

The cases are ``tests/campaign_cases.py``'s table (the one ``tests/cli/test_campaign.py``
asserts); each runs against a fresh SQLite store in a temporary folder. Columns: the
case, the exit code (expected in parentheses when it differs), the first line of the
message, and whether the store was left unchanged (and no artifact code ran).

    python examples/campaign_table.py [--keep DIR] [--in-process-only]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from campaign_cases import CASES, run_case
from campaign_store import build_campaign


def _cell(text: str, width: int = 110) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("|", "\\|").replace("<", "&lt;")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="Build the store in this folder and keep it")
    parser.add_argument(
        "--in-process-only", action="store_true", help="Skip the subprocess (fault) cases"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="campaign-") as tmp:
        root = options.keep or Path(tmp) / "store"
        started = time.time()
        campaign = build_campaign(root)
        print(f"store built in {time.time() - started:.0f} s at {root}", file=sys.stderr)
        print("| # | area | case | exit code | message | store unchanged |")
        print("| ---: | --- | --- | :---: | --- | :---: |")
        as_expected = 0
        cases = [c for c in CASES if not (options.in_process_only and c.subprocess)]
        for number, case in enumerate(cases, 1):
            outcome = run_case(case, campaign)
            code = str(outcome.exit_code)
            if outcome.exit_code != case.exit_code:
                code += f" (expected {case.exit_code})"
            named = re.search(case.message, outcome.output, re.DOTALL) is not None
            unchanged = not outcome.changes and not outcome.code_ran
            if outcome.code_ran:
                unchanged_cell = "no: artifact code ran"
            elif outcome.changes:
                unchanged_cell = "no: " + _cell("; ".join(outcome.changes), 60)
            else:
                unchanged_cell = "yes"
            message = _cell(outcome.message(case.message))
            message += "" if named else " (does not name it)"
            print(
                f"| {number} | {case.area} | {_cell(case.name)} | {code} | {message} | "
                f"{unchanged_cell} |"
            )
            as_expected += outcome.exit_code == case.exit_code and named and unchanged
        print(f"\n{as_expected} of {len(cases)} cases refused as specified.")
    return 0 if as_expected == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
