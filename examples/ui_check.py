"""Check ``report.html`` inside MLflow's artifact viewer with headless Chromium (outside
``make test``).

Starts ``mlflow ui`` on a store (the demo's by default), opens the surrogate's logged
model, Artifacts tab, ``report.html`` (MLflow 3 shows an HTML artifact in an
``<iframe sandbox="allow-scripts">`` from a blob URL, 100% of the viewer pane), and at
each window width (default 1400 and 870 px):

- saves a screenshot of the viewer and one of the report's whole document (PNG, in a
  temporary folder unless ``--output`` is given);
- prints what is clipped inside the report: the page wider than the frame, any element
  whose content is wider than its box (``scrollWidth > clientWidth``) and does not
  scroll it (``overflow-x`` neither auto nor scroll), and SVG text drawn outside its
  figure;
- types one applicant into the "Try an applicant" panel (the first example row the
  report lists, else the middle of each numeric column's range) and prints the answer.

The report's frame is reached through its own DevTools session (:class:`ReportFrame`). Chromium is driven
by :class:`examples.screenshots.Chromium`. Run after ``make demo``::

    .venv/bin/python examples/ui_check.py --name wisconsin-rf --version 1

Exit code 1 when anything is clipped, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from mlflow import MlflowClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import (
    ARTIFACT_TREE,
    CLICK_ARTIFACT,
    REPORT,
    VIEWER,
    Chromium,
    linked_surrogate,
    running_ui,
    settle,
)

# Runs in the report's frame: what is clipped, as a list of one-line findings.
CLIPPED = """(() => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth)
    found.push(`the page is ${root.scrollWidth} px wide in a ${root.clientWidth} px frame`);
  const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
    (e.className && typeof e.className === 'string' ? '.' + e.className.split(' ').join('.') : '');
  for (const e of document.querySelectorAll('body *')) {
    if (e.closest('svg') || e.scrollWidth <= e.clientWidth + 1 || e.clientWidth === 0) continue;
    const overflow = getComputedStyle(e).overflowX;
    if (overflow === 'auto' || overflow === 'scroll') continue;
    found.push(`${name(e)} clips: content ${e.scrollWidth} px in ${e.clientWidth} px`);
  }
  for (const svg of document.querySelectorAll('svg')) {
    const box = svg.viewBox.baseVal;
    if (!box || !box.width) continue;
    for (const text of svg.querySelectorAll('text')) {
      const b = text.getBBox();
      if (b.x < box.x - 0.5 || b.x + b.width > box.x + box.width + 0.5)
        found.push(`SVG text outside its figure: "${text.textContent.slice(0, 60)}"`);
    }
  }
  const scrolling = [...document.querySelectorAll('.figure, .grid > *, .nodes > *, .scroll')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(name);
  return {found: found, scrolling: scrolling, width: root.clientWidth};
})()"""

# Runs in the report's frame: fills the panel with one row and follows it.
TYPE_APPLICANT = """(() => {
  const model = JSON.parse(document.getElementById('applicant-model').textContent);
  const form = document.getElementById('applicant-form');
  if (!form) return null;
  for (const column of model.columns) {
    const field = form.elements[column.name];
    field.value = column.kind === 'category' ? column.categories[0] : '%s';
  }
  document.getElementById('applicant-follow').click();
  return document.getElementById('applicant-result').innerText;
})()"""


class ReportFrame:
    """The report's frame in the viewer, reached through its own DevTools session: MLflow
    loads it from a blob URL in a sandbox, an opaque origin Chromium runs in a frame of
    its own (an "iframe" target), which no script of the viewer can reach."""

    def __init__(self, browser: Chromium, timeout: float):
        self._browser = browser
        page, browser._session = browser._session, None  # browser-level commands
        try:
            deadline = time.monotonic() + timeout
            while True:
                targets = browser.call("Target.getTargets")["targetInfos"]
                frames = [t for t in targets if t["type"] == "iframe"]
                if frames or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
            if not frames:
                raise SystemExit("no frame with the report in the artifact viewer")
            target = frames[-1]["targetId"]
            self._session = browser.call("Target.attachToTarget", targetId=target, flatten=True)[
                "sessionId"
            ]
        finally:
            browser._session = page

    def evaluate(self, expression: str):
        """The JSON value of ``expression`` evaluated in the report's frame."""
        page, self._browser._session = self._browser._session, self._session
        try:
            result = self._browser.call(
                "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
            )
        finally:
            self._browser._session = page
        if "exceptionDetails" in result:
            raise SystemExit(f"the check failed in the frame: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")


def check_width(browser: Chromium, page: str, width: int, args) -> list[str]:
    """Screenshots and findings at one width; the findings."""
    browser.resize(width, args.height)
    browser.open(page, ARTIFACT_TREE, args.timeout)
    settle(browser, args.settle)
    quoted = json.dumps(REPORT)
    browser.wait_for(CLICK_ARTIFACT % quoted, args.timeout, f"no {REPORT} in the artifact tree")
    browser.wait_for(VIEWER % quoted, args.timeout, f"no viewer for {REPORT}")
    settle(browser, args.settle)
    frame = ReportFrame(browser, args.timeout)
    state = frame.evaluate(CLIPPED)
    print(f"\n{width} px window: the report's frame is {state['width']} px wide")
    for line in state["found"]:
        print(f"  CLIPPED {line}")
    if state["scrolling"]:
        print(f"  scrolls sideways (by design): {', '.join(state['scrolling'])}")
    answer = frame.evaluate(TYPE_APPLICANT % args.value)
    if answer is None:
        print("  no applicant panel in this report")
    else:
        time.sleep(0.3)
        answer = frame.evaluate("document.getElementById('applicant-result').innerText")
        print("  applicant typed (every number " + args.value + ", first categories):")
        print("\n".join(f"    {line}" for line in answer.splitlines() if line.strip()))
    browser.screenshot(args.output / f"viewer_{width}.png")
    frame.evaluate("document.getElementById('applicant').scrollIntoView()")
    time.sleep(0.3)
    browser.screenshot(args.output / f"viewer_panel_{width}.png")
    print(f"  screenshots: {args.output / f'viewer_{width}.png'}, viewer_panel_{width}.png")
    return state["found"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    parser.add_argument("--name", default="wisconsin-rf", help="registered ensemble name")
    parser.add_argument("--version", default="1", help="an explained ensemble version")
    parser.add_argument("--output", type=Path, help="screenshot folder (default: a temp one)")
    parser.add_argument("--widths", nargs="+", type=int, default=[1400, 870])
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--value", default="15", help="what the panel gets for every number")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for a page")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds for the UI")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)
    args.output = (args.output or Path(tempfile.mkdtemp(prefix="ui-check-"))).resolve()
    args.output.mkdir(parents=True, exist_ok=True)

    browser = None
    found = []
    with running_ui(args.tracking_uri, args.output / "mlflow-ui.log") as base:
        try:
            client = MlflowClient(tracking_uri=base, registry_uri=base)
            surrogate = linked_surrogate(client, args.name, args.version)
            model = client.get_logged_model(
                surrogate.model_id or surrogate.source.removeprefix("models:/")
            )
            page = f"{base}/#/experiments/{model.experiment_id}/models/{model.model_id}/artifacts"
            browser = Chromium(args.chromium, args.widths[0], args.height)
            for width in args.widths:
                found += check_width(browser, page, width, args)
        finally:
            if browser is not None:
                browser.close()
    print(f"\n{len(found)} clipped element(s); screenshots in {args.output}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
