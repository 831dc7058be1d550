"""Screenshots of the reviewer's path in MLflow's UI, taken with headless Chromium.

Starts ``mlflow ui`` on the given store (the venv's ``mlflow``, a free localhost port),
follows the ensemble version's link to its surrogate (tag ``governance.surrogate``) and
captures, at each width (default 1400 px for a desktop and 870 px for MLflow's artifact
viewer):

- ``ensemble_version``: the ensemble version page,
- ``surrogate_version``: the surrogate version page,
- ``artifacts``: the surrogate's logged-model artifact tab of the UI,
- ``report``: the surrogate's ``report.html`` as MLflow serves it (fetched from the
  logged-model artifact endpoint, rendered from a local copy: MLflow sends artifacts as
  attachments, which a browser downloads instead of showing),
- ``tree``: the tree figure (PNG) from the same endpoint.

Run after ``make demo`` (Chromium: ``apt-get install chromium``)::

    .venv/bin/python examples/screenshots.py --name wisconsin-rf --version 1

PNG paths are printed, one per line.
"""

from __future__ import annotations

import argparse
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

from flavors.explain import SURROGATE_TAG

REPORT = "report.html"
TREE_FIGURES = ("figures/surrogate_tree.png", "surrogate_tree.png")


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
    """Poll ``/health`` until the server answers; fail with its log if it dies or stalls."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"mlflow ui exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:  # refused, reset or timed out while the server starts
            time.sleep(0.5)
    raise SystemExit(f"mlflow ui did not answer within {timeout:g} s; log: {log}")


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


def screenshot(chromium: str, url: str, png: Path, width: int, height: int, budget_ms: int):
    """One headless Chromium capture of ``url`` into ``png``."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        command = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png}",
            f"--virtual-time-budget={budget_ms}",
            url,
        ]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not png.exists():
        raise SystemExit(f"chromium failed on {url}:\n{done.stderr[-2000:]}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    parser.add_argument("--name", default="wisconsin-rf", help="registered ensemble name")
    parser.add_argument("--version", default="1", help="ensemble version")
    parser.add_argument("--output", type=Path, default=Path("demo-output/screenshots"))
    parser.add_argument("--widths", nargs="+", type=int, default=[1400, 870])
    parser.add_argument("--height", type=int, default=1100)
    parser.add_argument(
        "--budget-ms", type=int, default=15000, help="Chromium's virtual time for a page to settle"
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args(argv)

    args.output.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = args.output / "mlflow-ui.log"
    server = start_ui(args.tracking_uri, port, log)
    try:
        wait_until_up(base, server, log, timeout=120)
        client = MlflowClient(tracking_uri=base, registry_uri=base)
        surrogate = linked_surrogate(client, args.name, args.version)
        # The registry leaves model_id empty for versions registered from a logged model's
        # URI; their source is then ``models:/<model_id>``.
        model = client.get_logged_model(
            surrogate.model_id or surrogate.source.removeprefix("models:/")
        )
        files = args.output / "artifacts"
        files.mkdir(exist_ok=True)
        report = fetch_artifact(base, model.model_id, (REPORT,), files)
        tree = fetch_artifact(base, model.model_id, TREE_FIGURES, files)
        pages = {
            "ensemble_version": f"{base}/#/models/{args.name}/versions/{args.version}",
            "surrogate_version": f"{base}/#/models/{surrogate.name}/versions/{surrogate.version}",
            "artifacts": (
                f"{base}/#/experiments/{model.experiment_id}/models/{model.model_id}/artifacts"
            ),
            "report": report.resolve().as_uri(),
            "tree": tree.resolve().as_uri(),
        }
        for width in args.widths:
            for page, url in pages.items():
                png = (args.output / f"{page}_{width}.png").resolve()
                screenshot(args.chromium, url, png, width, args.height, args.budget_ms)
                print(png, flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
