"""Screenshots of the reviewer's path in MLflow's UI, taken with headless Chromium.

Starts ``mlflow ui`` on the given store (the venv's ``mlflow``, a free localhost port),
follows each ensemble version's link to its surrogate (tag ``governance.surrogate``) and
captures, at each width (default 1400 px for a desktop and 870 px, about what MLflow's
artifact viewer leaves a report on a laptop), screen after screen down to the end
(mouse-wheel scrolls, until the screen stops changing or ``--screens`` is reached):

- ``ensemble_v<N>`` (``_2``, ``_3``, ...): each ensemble version page (description
  first: decisions, who made them, "Since the champion" after a drift gate),
- ``surrogate_v<N>``: its surrogate version page,
- ``gate_report_v<N>``: ``gate_report.md`` of the version's last gate run, in the run's
  artifact viewer,

and of the last version given:

- ``report_in_viewer`` (``_2``, ...): the surrogate's logged model, Artifacts tab,
  ``report.html`` clicked, as MLflow shows it in its sandboxed viewer,
- ``model_card_in_viewer`` (``_2``, ...): ``model_card.md`` in the same viewer,
- ``report``, ``tree``, ``vite_tree``: ``report.html`` and the two figures (SVG, else
  PNG) opened directly, as one full-page image each (local copies fetched from the
  logged model's artifact endpoint: MLflow sends artifacts as attachments).

MLflow's "Assistant" side panel is closed when it is open, so the page shows the
content. Scrollbars stay visible, as a reader sees them (a figure wider than the viewer
scrolls sideways). Chromium is driven through its DevTools protocol over ``--remote-debugging-pipe``
(the standard library only: no Selenium, no WebSocket package).

Run after ``make demo`` (Chromium: ``apt-get install chromium``)::

    .venv/bin/python examples/screenshots.py --name wisconsin-rf --versions 1 2

PNG paths are printed, one per line.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from mlflow import MlflowClient

from miret_governance.flavors.store.registry import GATE_RUN_TAG, SURROGATE_TAG

REPORT = "report.html"
MODEL_CARD = "model_card.md"
GATE_REPORT = "gate_report.md"
FIGURES = {
    "tree": ("figures/surrogate_tree.svg", "figures/surrogate_tree.png", "surrogate_tree.png"),
    "vite_tree": ("figures/vite_tree.svg", "figures/vite_tree.png"),
}

# Runs in the page: closes MLflow's Assistant side panel when it is open (its header reads
# "MLflow Assistant"; the nearest enclosing block with a "Close" button is the panel).
CLOSE_ASSISTANT = """(() => {
  for (const button of document.querySelectorAll('button[aria-label="Close"]')) {
    let block = button.parentElement;
    for (let up = 0; block && up < 4; up++, block = block.parentElement) {
      if (block.innerText.includes('MLflow Assistant')) {
        button.click();
        return true;
      }
    }
  }
  return false;
})()"""

# Runs in the page: clicks the artifact tree's entry of the file %s; true when found.
CLICK_ARTIFACT = """(() => {
  const node = document.querySelector(
    '[data-testid="artifact-tree-node"][artifact-name=' + JSON.stringify(%s) + ']');
  if (!node) return false;
  node.firstElementChild.click();
  return true;
})()"""

# Runs in the page: true once the artifact tree shows.
ARTIFACT_TREE = "!!document.querySelector('[data-testid=\"artifact-tree-node\"]')"

# Runs in the page: [x, y, height] of the preview pane of the file %s: its iframe for
# HTML (null until it exists), the area right of the artifact tree otherwise.
VIEWER = """(() => {
  const frame = [...document.querySelectorAll('iframe')]
    .map(f => f.getBoundingClientRect()).find(r => r.width > 100 && r.height > 100);
  const tree = document.querySelector('[data-testid="artifact-tree-node"]');
  if (!tree || (%s.endsWith('.html') && !frame)) return null;
  const left = tree.getBoundingClientRect().right;
  const box = frame || {left: left, width: window.innerWidth - left, top: 200,
                        height: window.innerHeight - 200};
  return [box.left + box.width / 2, box.top + box.height / 2, box.height];
})()"""


def free_port() -> int:
    """A localhost TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_ui(store_uri: str, port: int, log: Path) -> subprocess.Popen:
    """``mlflow ui`` of this interpreter's environment on ``store_uri``."""
    mlflow = Path(sys.executable).parent / "mlflow"
    command = [str(mlflow), "ui", "--backend-store-uri", store_uri]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    # Its own session, so that stopping it also stops the workers it spawns.
    return subprocess.Popen(
        command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def wait_until_up(base: str, server: subprocess.Popen, log: Path, timeout: float) -> None:
    """Poll ``/health`` until the server answers; fail with its log if it dies or stalls
    (the polling is the local stack's, ``examples/server/stack.py``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
    from stack import wait_for_health

    try:
        wait_for_health(base, server, timeout)
    except (RuntimeError, TimeoutError) as error:
        raise SystemExit(f"mlflow ui: {error}; log: {log}\n{log.read_text()}") from None


@contextlib.contextmanager
def running_ui(store_uri: str, log: Path):
    """``mlflow ui`` on ``store_uri`` at a free localhost port while the block runs (its
    base URL), stopped after it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_ui(store_uri, port, log)
    try:
        wait_until_up(base, server, log, timeout=120)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def linked_surrogate(client: MlflowClient, name: str, version: str):
    """The surrogate ModelVersion an ensemble version links to."""
    ensemble = client.get_model_version(name, version)
    link = ensemble.tags.get(SURROGATE_TAG)
    if not link or not link.startswith("models:/"):
        raise SystemExit(
            f"models:/{name}/{version} has no {SURROGATE_TAG} tag; explain it first "
            "(govern explain) or pick the ensemble version that was explained"
        )
    surrogate_name, surrogate_version = link.removeprefix("models:/").rsplit("/", 1)
    return client.get_model_version(surrogate_name, surrogate_version)


def fetch_artifact(base: str, model_id: str, paths: tuple[str, ...], folder: Path) -> Path:
    """Download the first of ``paths`` that the logged model has, through MLflow's server."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in paths:
        query = urllib.parse.urlencode({"artifact_file_path": path})
        url = f"{base}/ajax-api/2.0/mlflow/logged-models/{model_id}/artifacts/files?{query}"
        try:
            with urllib.request.urlopen(url, timeout=30) as answer:
                target = folder / Path(path).name
                target.write_bytes(answer.read())
                return target
        except urllib.error.HTTPError:
            continue
    raise SystemExit(f"logged model {model_id} has none of {', '.join(paths)}")


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fds 3 and 4).

    Messages are JSON objects separated by a NUL byte. One page (tab) is attached in
    flat session mode; :meth:`call` sends a command and returns its result, skipping the
    events that arrive in between.
    """

    def __init__(self, executable: str, width: int, height: int):
        # The protocol's descriptors are fixed: Chromium reads fd 3 and writes fd 4. The
        # pipes are handed over as stdin and stdout, and a shell moves them onto 3 and 4.
        inbound, self._commands = os.pipe()
        self._answers, outbound = os.pipe()
        onto_3_and_4 = 'exec "$@" 3<&0 4>&1 0</dev/null 1>/dev/null'
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")
        command = [
            executable,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile.name}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._process = subprocess.Popen(
            ["/bin/sh", "-c", onto_3_and_4, "sh", *command],
            stdin=inbound,
            stdout=outbound,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(inbound)
        os.close(outbound)
        self._buffer = b""
        self._next_id = 0
        self._session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable")
        self.resize(width, height)

    def call(self, method: str, **params) -> dict:
        """Send one command to the page (the browser before a page exists)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self._session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._answers, 1 << 16)
                if not chunk:
                    raise SystemExit(f"chromium closed the DevTools pipe during {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise SystemExit(f"chromium refused {method}: {answer['error']}")
                return answer.get("result", {})

    def resize(self, width: int, height: int) -> None:
        """Viewport of ``width`` x ``height`` CSS pixels at scale 1."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, ready: str, timeout: float) -> None:
        """Navigate and wait until the JavaScript condition ``ready`` holds."""
        self.call("Page.navigate", url=url)
        self.wait_for(ready, timeout, f"{url} did not show ({ready})")

    def wait_for(self, condition: str, timeout: float, failure: str):
        """Poll a JavaScript expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(condition)
            if value:
                return value
            time.sleep(0.25)
        raise SystemExit(f"{failure} within {timeout:g} s")

    def wheel(self, x: float, y: float, delta_y: float) -> None:
        """A mouse-wheel scroll at (x, y), e.g. over an iframe the page cannot script."""
        self.call("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=delta_y)

    def screenshot(self, png: Path, full_page: bool = False) -> bytes:
        """The viewport (``full_page``: the whole document) as a PNG file; its bytes."""
        options = {}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            options = {"clip": clip, "captureBeyondViewport": True}
        data = base64.b64decode(
            self.call("Page.captureScreenshot", format="png", **options)["data"]
        )
        png.write_bytes(data)
        return data

    def close(self) -> None:
        """Stop the browser and remove its profile."""
        os.close(self._commands)
        os.close(self._answers)
        os.killpg(self._process.pid, signal.SIGTERM)
        self._process.wait(timeout=30)
        self._profile.cleanup()


def settle(browser: Chromium, seconds: float) -> None:
    """Let the single-page app finish rendering, then close the Assistant panel."""
    time.sleep(seconds)
    if browser.evaluate(CLOSE_ASSISTANT):
        time.sleep(0.5)


def capture_width(browser, pages, args, width) -> list[Path]:
    """Every screenshot at one window width."""
    browser.resize(width, args.height)
    shots = []

    def shoot(name: str, full_page: bool = False) -> bytes:
        png = (args.output / f"{name}_{width}.png").resolve()
        data = browser.screenshot(png, full_page)
        shots.append(png)
        return data

    def screens(name: str, x: float, y: float, height: float) -> None:
        """The first screen, then one per wheel scroll until the screen stops changing."""
        last = shoot(name)
        for part in range(2, args.screens + 1):
            browser.wheel(x, y, 0.9 * height)
            time.sleep(0.7)
            current = shoot(f"{name}_{part}")
            if current == last:
                shots.pop().unlink()
                return
            last = current

    def open_artifact(page: str, file: str) -> tuple:
        browser.open(page, ARTIFACT_TREE, args.timeout)
        settle(browser, args.settle)
        quoted = json.dumps(file)
        browser.wait_for(CLICK_ARTIFACT % quoted, args.timeout, f"no {file} in the artifact tree")
        found = browser.wait_for(VIEWER % quoted, args.timeout, f"no viewer for {file}")
        settle(browser, args.settle)
        return found

    middle = (width / 2, args.height / 2, args.height - 150)
    for name, page in pages["versions"].items():
        browser.open(page, "document.body.innerText.includes('Version')", args.timeout)
        settle(browser, args.settle)
        screens(name, *middle)
    for name, page in pages["gate_runs"].items():
        screens(name, *open_artifact(page, GATE_REPORT))
    for name, file in (("report_in_viewer", REPORT), ("model_card_in_viewer", MODEL_CARD)):
        screens(name, *open_artifact(pages["artifacts"], file))
    for name, url in pages["files"].items():
        browser.open(url, "document.readyState === 'complete'", args.timeout)
        time.sleep(0.5)
        shoot(name, full_page=True)
    return shots


def version_pages(client, base: str, name: str, version: str, files: Path) -> dict:
    """The pages of one ensemble version: its page, its surrogate's, the artifacts of
    the surrogate's logged model and of the last gate run, local copies of the files."""
    surrogate = linked_surrogate(client, name, version)
    # The registry leaves model_id empty for versions registered from a logged model's
    # URI; their source is then ``models:/<model_id>``.
    model = client.get_logged_model(surrogate.model_id or surrogate.source.removeprefix("models:/"))
    pages = {
        "versions": {
            f"ensemble_v{version}": f"{base}/#/models/{name}/versions/{version}",
            f"surrogate_v{version}": f"{base}/#/models/{surrogate.name}/versions/{surrogate.version}",
        },
        "gate_runs": {},
        "artifacts": f"{base}/#/experiments/{model.experiment_id}/models/{model.model_id}/artifacts",
        "files": {"report": fetch_artifact(base, model.model_id, (REPORT,), files).as_uri()},
    }
    for figure, paths in FIGURES.items():
        pages["files"][figure] = fetch_artifact(base, model.model_id, paths, files).as_uri()
    gate_run = client.get_model_version(name, version).tags.get(GATE_RUN_TAG)
    if gate_run:
        experiment = client.get_run(gate_run).info.experiment_id
        pages["gate_runs"][f"gate_report_v{version}"] = (
            f"{base}/#/experiments/{experiment}/runs/{gate_run}/artifacts"
        )
    return pages


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    parser.add_argument("--name", default="wisconsin-rf", help="registered ensemble name")
    parser.add_argument(
        "--versions", nargs="+", default=["1"], help="ensemble versions (report: the last)"
    )
    parser.add_argument("--output", type=Path, default=Path("demo-output/screenshots"))
    parser.add_argument("--widths", nargs="+", type=int, default=[1400, 870])
    parser.add_argument("--height", type=int, default=1100)
    parser.add_argument("--screens", type=int, default=30, help="most screens of one page")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for a page")
    parser.add_argument(
        "--settle", type=float, default=2.0, help="seconds for the UI to finish rendering"
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)

    args.output.mkdir(parents=True, exist_ok=True)
    browser = None
    with running_ui(args.tracking_uri, args.output / "mlflow-ui.log") as base:
        try:
            client = MlflowClient(tracking_uri=base, registry_uri=base)
            files = (args.output / "artifacts").resolve()
            files.mkdir(exist_ok=True)
            pages = {"versions": {}, "gate_runs": {}}
            for version in args.versions:
                found = version_pages(client, base, args.name, version, files / version)
                pages["versions"] |= found["versions"]
                pages["gate_runs"] |= found["gate_runs"]
            pages |= {"artifacts": found["artifacts"], "files": found["files"]}
            browser = Chromium(args.chromium, args.widths[0], args.height)
            for width in args.widths:
                for png in capture_width(browser, pages, args, width):
                    print(png, flush=True)
        finally:
            if browser is not None:
                browser.close()


if __name__ == "__main__":
    main()
