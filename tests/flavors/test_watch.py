"""``govern watch`` against a real ``mlflow server`` (SQLite, 127.0.0.1) sending real
webhook deliveries: a new version of a watched model explained, a hand-set alias
reported (on the watched model and on its governed registered model), a bad signature
refused, a delivery sent while the receiver was stopped caught up at its next start and
one accepted before it refused when replayed after. Outcomes are polled for with a deadline (never timed)."""

import json
import time
import urllib.error
import urllib.request

import pytest
from cryptography.fernet import Fernet
from mlflow import MlflowClient
from mlflow.webhooks.delivery import _generate_hmac_signature
from mlflow_store import register_sklearn
from signing_keys import ci_key, keys_toml
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sqlite_server import Server

from miret_governance.flavors.store.registry import SURROGATE_TAG
from miret_governance.flavors.trail.decisions import VERIFICATION_EXPERIMENT
from miret_governance.flavors.watch.config import load_watch_file
from miret_governance.flavors.watch.deliveries import Verifier
from miret_governance.flavors.watch.receiver import Receiver, register_webhook
from miret_governance.flavors.watch.work import Watcher
from miret_governance.governance.trust.policy import load_policy

SECRET = "watch-test-shared-secret"
MODEL = "watched-rf"
GOVERNED = f"{MODEL}.governed"
DEADLINE_S = 120
"""How long an outcome is waited for before the test fails (a bound, not a measure)."""
WEBHOOK_ENV = {
    # MLflow delivers to https and public addresses only, unless told otherwise
    "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
    "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
    # the server caches each event's webhook list (60 s): a webhook registered by a test
    # is used at once
    "MLFLOW_WEBHOOK_CACHE_TTL": "0",
    # no retry: a delivery to a stopped receiver is lost, as after MLflow's 3 retries
    "MLFLOW_WEBHOOK_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": Fernet.generate_key().decode(),
}


class Lines(list):
    """The watch's outcome lines (appended from its threads)."""

    def waited_for(self, text: str, start: int = 0) -> str:
        """The first line containing ``text`` from line ``start`` on, waited for up to
        :data:`DEADLINE_S`."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            found = next((line for line in list(self)[start:] if text in line), None)
            if found is not None:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no line with {text!r} within {DEADLINE_S} s: {list(self)}")


class Watch:
    """A watcher and its receiver, started and stopped in the test process."""

    def __init__(self, folder, port: int = 0):
        self.lines = Lines()
        self.watcher = Watcher(
            load_watch_file(folder / "watch.toml"),
            load_policy(folder / "policy.toml"),
            ci_key(),
            self.lines.append,
        )
        verifier = Verifier(SECRET, state=folder / "state")
        self.receiver = Receiver(verifier, self.watcher, self.lines.append, "127.0.0.1", port)
        self.url = self.receiver.start()

    def stop(self) -> None:
        self.receiver.stop()
        self.watcher.close()


def _point_at(monkeypatch, url: str) -> None:
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.setenv(name, url)


@pytest.fixture(scope="module")
def watched(tmp_path_factory, migrated_store):
    """A server delivering to a running watch, and a forest registered as ``MODEL`` on
    it after the webhook was: its version 1 explained because of that delivery."""
    folder = tmp_path_factory.mktemp("watch")
    server = Server(folder, migrated_store, env=WEBHOOK_ENV)
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X, y = X.iloc[:120, :4], y.iloc[:120]
    X.assign(label=y).to_csv(folder / "data.csv", index=False)
    (folder / "policy.toml").write_text(
        "[gates]\nmin_fidelity = 0.5\nmax_features = 8\n"
        f'[governed."{MODEL}"]\nexperiment = "Default"\n' + keys_toml()
    )
    (folder / "watch.toml").write_text(
        f'[models."{MODEL}"]\ndata = "data.csv"\ntarget = "label"\ntime_limit = 5\n'
        "min_test_rows = 5\nalpha = 0.5\nproximity_threshold = 0.9\n"
    )
    with server.serving(), pytest.MonkeyPatch.context() as mp:
        _point_at(mp, server.url)
        watch = Watch(folder)
        try:
            client = MlflowClient()
            webhook, created = register_webhook(client, watch.url, SECRET)
            assert created and register_webhook(client, watch.url, SECRET)[1] is False
            forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
            register_sklearn(make_pipeline(MinMaxScaler(), forest).fit(X, y), MODEL)
            explained = watch.lines.waited_for(f"models:/{MODEL}/1 explained:")
            yield server, watch, folder, webhook, explained
        finally:
            watch.stop()


@pytest.fixture
def on_server(watched, monkeypatch):
    server, *_ = watched
    _point_at(monkeypatch, server.url)
    return watched


def _audit_records(client, result: str) -> list:
    """The watch's audit verification records of version 1 with ``result``."""
    experiment = client.get_experiment_by_name(VERIFICATION_EXPERIMENT)
    if experiment is None:
        return []
    return client.search_runs(
        [experiment.experiment_id],
        f"tags.`governance.verification.action` = 'audit' and "
        f"tags.`governance.verification.result` = '{result}'",
    )


def test_a_new_version_is_explained_once(on_server):
    _, watch, _, webhook, explained = on_server
    client = MlflowClient()
    assert [w.webhook_id for w in client.list_webhooks()] == [webhook.webhook_id]
    assert explained.startswith(
        f"models:/{MODEL}/1 explained: models:/{MODEL}-surrogate/1 (delivery "
    )
    assert (
        client.get_model_version(MODEL, "1").tags[SURROGATE_TAG] == f"models:/{MODEL}-surrogate/1"
    )
    # the surrogate's own version was delivered too, and ignored: it is not watched
    watch.lines.waited_for(f"model_version.created {MODEL}-surrogate: ignored: ")
    # the same event delivered again (a new id: e.g. a second webhook) reuses the explanation
    body = json.dumps(
        {"entity": "model_version", "action": "created", "data": {"name": MODEL, "version": "1"}}
    )
    assert _post(watch.url, body, "again-1") == 202
    reused = watch.lines.waited_for(f"models:/{MODEL}/1 already explained by ")
    assert reused == (
        f"models:/{MODEL}/1 already explained by models:/{MODEL}-surrogate/1 (delivery again-1)"
    )
    assert _post(watch.url, body, "again-1") == 409  # the very same delivery: replayed
    assert [v.version for v in client.search_model_versions(f"name = '{MODEL}-surrogate'")] == ["1"]


def _post(url: str, body: str, delivery_id: str, stamp: str = "") -> int:
    """POST ``body`` to the receiver signed with :data:`SECRET` at ``stamp`` (Unix
    seconds; default now); the HTTP status."""
    stamp = stamp or str(int(time.time()))
    headers = {
        "X-MLflow-Delivery-Id": delivery_id,
        "X-MLflow-Timestamp": stamp,
        "X-MLflow-Signature": _generate_hmac_signature(SECRET, delivery_id, stamp, body),
    }
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_hand_set_alias_is_reported_within_seconds(on_server, capsys):
    _, watch, *_ = on_server
    client = MlflowClient()
    set_at = time.monotonic()
    client.set_registered_model_alias(MODEL, "champion", "1")
    finding = watch.lines.waited_for(f"FINDING alias models:/{MODEL}/1 @champion: ")
    watch.lines.waited_for(f"audit of {MODEL} under policy ")
    with capsys.disabled():
        print(f"\nhand-set alias reported after {time.monotonic() - set_at:.2f} s")
    assert "without a valid signed promotion decision for it" in finding
    failed = _audit_records(client, "failed")
    assert [r.data.tags["governance.verification.detail"][:40] for r in failed] == [
        "1 finding(s), the first: alias: @champio"
    ]


def test_a_bad_signature_is_refused_and_nothing_is_done(on_server):
    _server, watch, _, webhook, _ = on_server
    client = MlflowClient()
    said = len(watch.lines)
    before = len(
        client.search_runs([client.get_experiment_by_name(VERIFICATION_EXPERIMENT).experiment_id])
    )
    wrong = client.create_webhook(
        "wrong-secret", watch.url + "other", ["model_version_alias.created"], secret="x" * 24
    )
    try:  # MLflow's own test delivery, signed with another secret
        result = client.test_webhook(wrong.webhook_id)
    finally:
        client.delete_webhook(wrong.webhook_id)
    assert (result.success, result.response_status) == (False, 401)
    assert (
        result.response_body.startswith("delivery '")
        and "has a bad signature" in result.response_body
    )
    request = urllib.request.Request(watch.url, data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(request, timeout=10)
    assert unsigned.value.code == 401
    assert watch.lines[said:] == [  # nothing queued: a queued job is said before the answer
        f"refused (401): {result.response_body}",
        "refused (401): unsigned delivery '': give the webhook the shared secret",
    ]
    runs = client.search_runs(
        [client.get_experiment_by_name(VERIFICATION_EXPERIMENT).experiment_id]
    )
    assert len(runs) == before
    # the registered webhook's own test delivery passes (its example model is not watched)
    assert client.test_webhook(webhook.webhook_id).response_status == 202


def test_a_delivery_while_stopped_is_caught_up_at_the_next_start(on_server):
    _server, watch, folder, *_ = on_server
    client = MlflowClient()
    port = int(watch.url.rsplit(":", 1)[1].strip("/"))
    # a delivery accepted before the stop, to replay after it (a model not watched)
    sent = json.dumps({"entity": "model_version", "action": "created", "data": {"name": "x"}})
    stamp = str(int(time.time()))
    assert _post(watch.url, sent, "before-stop", stamp) == 202
    watch.stop()
    try:
        client.set_registered_model_alias(MODEL, "challenger", "1")
        # a version no explanation can take (not a tree ensemble): its explain fails fast
        X, y = load_breast_cancer(return_X_y=True, as_frame=True)
        register_sklearn(LogisticRegression().fit(X.iloc[:120, :4], y.iloc[:120]), MODEL)
        log = folder / "server.log"
        deadline = time.monotonic() + DEADLINE_S
        while log.read_text(errors="replace").count(f"Failed to send webhook to {watch.url}") < 2:
            assert time.monotonic() < deadline, "the server never tried to deliver"
            time.sleep(0.05)
    finally:
        restarted = Watch(folder, port)
        watch.receiver, watch.watcher, watch.lines = (
            restarted.receiver,
            restarted.watcher,
            restarted.lines,
        )
    assert _post(watch.url, sent, "before-stop", stamp) == 409  # the same bytes, replayed
    assert [str(job) for job in watch.watcher.catch_up()] == [
        f"explain models:/{MODEL}/2 (catch-up)",
        f"audit {MODEL} (catch-up)",
    ]
    failed = watch.lines.waited_for(f"error: explain models:/{MODEL}/2 (catch-up): ")
    assert "Unsupported model sklearn.linear_model._logistic.LogisticRegression" in failed
    watch.lines.waited_for(f"FINDING alias models:/{MODEL}/1 @challenger: ")
    watch.lines.waited_for(f"audit of {MODEL} under policy ")


def test_govern_watch_register_updates_the_webhook_of_the_same_url(on_server, monkeypatch):
    from typer.testing import CliRunner

    from miret_governance.cli.app import app

    server, watch, _, webhook, _ = on_server
    monkeypatch.setenv("GOVERN_WEBHOOK_SECRET", SECRET)
    result = CliRunner().invoke(
        app, ["watch", "--register", "--url", watch.url, "--tracking-uri", server.url]
    )
    assert (result.exit_code, result.stdout) == (
        0,
        (
            f"webhook {webhook.webhook_id} updated (same URL): model_version.created, "
            f"model_version_alias.created, model_version_alias.deleted to {watch.url}\n"
        ),
    )


def test_a_hand_set_alias_on_the_governed_model_is_reported(on_server):
    """The policy governs the watched model: a promotion sets its alias on the governed
    registered model too (flavors/trail/governed.py), and an alias set there by hand is
    a finding of the watched model's audit, triggered by the governed model's delivery."""
    from miret_governance.flavors.trail.promotion import promote_model_version

    _, watch, folder, *_ = on_server
    client = MlflowClient()
    policy = load_policy(folder / "policy.toml")
    promoted = promote_model_version(f"models:/{MODEL}/1", "prod", policy, signing_key=ci_key())
    assert promoted.promoted and promoted.governed == f"models:/{GOVERNED}/1"
    client.set_registered_model_alias(GOVERNED, "staging", "1")
    finding = watch.lines.waited_for(f"FINDING alias models:/{GOVERNED}/1 @staging: ")
    assert finding == (
        f"FINDING alias models:/{GOVERNED}/1 @staging: @staging is on models:/{GOVERNED}/1, "
        "but no signed promotion to it exists: it was set by hand; promote the version that "
        "should hold it with govern promote --alias staging"
    )
    watch.lines.waited_for(f"audit of {MODEL} under policy ", watch.lines.index(finding))
    assert [line for line in watch.lines if "@prod" in line] == []  # promoted: no finding
