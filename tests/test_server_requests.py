"""How many HTTP requests each read or decide command makes of a real ``mlflow server``.

Against an authenticated server every request costs about half a second (issue 40), so
the number of round trips, not the CPU, is what a command's time is made of there. This
module starts one server (SQLite backend, proxied artifacts: ``test_server_e2e.Server``)
for the whole module, builds the state the end-to-end test ends in (an explained
version, gated, approved, promoted to ``@champion``), then runs ``show``, ``gate``,
``promote``, ``audit --model-name`` and ``approve`` once each and counts the requests
the server received, by endpoint.

The count is read from the server's own access log (uvicorn's, which ``mlflow server``
writes to its stdout, one line per request, written before the response is sent): what
the server received, whatever client library sent it, with nothing between client and
server. :data:`MAX_REQUESTS` pins each command's total, so a change that adds round trips
fails here with the table of endpoints to show where; a change that removes some should
lower the figure. The commands run in one fixed order on one store, so the counts are
exact (each command's records add to what the next one reads).
"""

import collections
import re
import time

import pytest
from mlflow import MlflowClient
from mlflow_store import register_sklearn
from signing_keys import ci_key, key_pair, keys_toml
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler
from sqlite_server import Server
from typer.testing import CliRunner

from miret_governance.cli.app import app

pytest_plugins = ["mlflow_store"]
pytestmark = pytest.mark.slow

MODEL = "models:/wisconsin-rf/1"
APPROVER = "reviewer"
MAX_REQUESTS = {
    "show": 61,
    "gate": 84,
    "promote": 105,
    "audit": 73,
    "approve": 83,
}
"""The most requests each command may make on this module's store (module docstring).

Most of them are files: a reader verifies the surrogate's signature over every file of
its model directory (here 24 files in 3 folders: one request a file, one a listing, the
root listed twice by MLflow) and hashes the ensemble version's files (5) against the
evidence, and reads each decision record it rests on as two files (record and
signature). The rest: the health probe, the two versions, one search for the governance
experiments, two run searches per set of experiments (MLflow's filter has no OR: the
bound parameter, then the tag), and the writes of the decide commands, each record's
with its model's chain lock (create, MLflow's prompt check, delete) and head search;
promote and audit also search every experiment for the model's record chain. Another model's
records (:data:`OTHER_RECORDS`) cost nothing. A command run in its own process also
makes MLflow's one ``server-info`` request (made here while the store was built).

``show`` and ``audit`` run with the session's key, so each leaves a verification record
(``flavors/trail/verification.py``): its run (create, parameters and tags, two files,
end) and the page's "Verified" section (one update, and MLflow's prompt check before
it): 7 requests, 11 for ``show`` here, the first in the store, which also looks up and
creates ``governance-verifications``; ``audit`` reads ``show``'s record and records its
own (12). The pages ``gate``, ``promote`` and ``approve`` write search the gate and
verification runs of the version again (2 each); ``show`` reads the last gate's run for its
alias and policy (1); a promotion that needs approvals writes its gate report again with
them (1)."""
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>[^ ?"]+)[^"]*" \d{3}')
_ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts/"


def endpoint(method: str, path: str) -> str:
    """An access-log request as its endpoint: artifact downloads and listings by kind
    (their paths name runs and files), every other request by method and path."""
    if path.startswith(_ARTIFACTS):
        return f"{method} {_ARTIFACTS}<file>"
    return f"{method} {path}"


class RequestLog:
    """The requests a :class:`test_server_e2e.Server` received, read from its access log."""

    def __init__(self, server: Server):
        self.path = server.folder / "server.log"

    def _lines(self) -> list[str]:
        return self.path.read_text(errors="replace").splitlines()

    def mark(self) -> int:
        return len(self._lines())

    def since(self, mark: int) -> collections.Counter:
        """Requests by endpoint logged after ``mark`` (:meth:`mark`)."""
        time.sleep(0.2)  # the log line is written before the response; this is margin only
        found = collections.Counter()
        for line in self._lines()[mark:]:
            match = _ACCESS.search(line)
            if match:
                found[endpoint(match["method"], match["path"])] += 1
        return found


@pytest.fixture(scope="module")
def served(tmp_path_factory, migrated_store, breast_cancer):
    """A server holding an explained, gated, approved and promoted ``wisconsin-rf`` v1;
    the policy file, the approver's key and the server's request log."""
    folder = tmp_path_factory.mktemp("requests")
    running = Server(folder, migrated_store)
    with pytest.MonkeyPatch.context() as mp:
        try:
            url = running.start()
            for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
                mp.setenv(name, url)
            mp.chdir(folder)
            # artifacts behind the server (mlflow-artifacts:), as on a shared server: the
            # default experiment of the copied store keeps its artifacts in a local folder
            MlflowClient().create_experiment("e2e")
            mp.setenv("MLFLOW_EXPERIMENT_NAME", "e2e")
            X, y = breast_cancer
            X, y = X.iloc[:200, :8], y.iloc[:200]
            X.assign(label=y).to_csv(folder / "train.csv", index=False)
            forest = RandomForestClassifier(n_estimators=5, max_depth=2, random_state=0)
            register_sklearn(make_pipeline(MinMaxScaler(), forest).fit(X, y), "wisconsin-rf")
            policy = folder / "policy.toml"
            policy.write_text(
                "[gates]\nmin_fidelity = 0.5\nmax_features = 8\n[approvals]\nchampion = 1\n"
                + keys_toml(approvers=(APPROVER,))
            )
            served = {"url": url, "policy": str(policy), "log": RequestLog(running)}
            explained = _govern(
                served, "explain", "--model-uri", MODEL, "--data", "train.csv",
                "--target", "label", "--time-limit", "5", "--min-test-rows", "5",
                "--alpha", "0.5", "--proximity-threshold", "0.9",
            )  # fmt: skip
            assert explained.exit_code == 0, explained.output
            for command in ("gate", "approve", "promote"):
                done = _run(served, command)
                assert done.exit_code == 0, done.output
            add_other_models_records(OTHER_RECORDS)
            yield served
        finally:
            running.stop()


OTHER_RECORDS = 3
"""Signed link records about another model's version, added last: no command about
``wisconsin-rf`` downloads them (the audit lists their runs and skips them by their
bound parameter), so they add no request to any pinned count."""


def add_other_models_records(count: int) -> None:
    """``count`` signed link records (the product's ``record_in_new_run``) about
    ``models:/other-model/<i>``, in the links experiment."""
    from miret_governance.flavors.store.registry import ENSEMBLE_URI_TAG
    from miret_governance.flavors.trail import decisions
    from miret_governance.governance.trust.keyring import TrustedKeys
    from miret_governance.governance.trust.records import LinkRecord, PinnedModel

    key, client = ci_key(), MlflowClient()
    by = decisions.decided_by(TrustedKeys(), key, client)
    for i in range(1, count + 1):
        uri = f"models:/other-model/{i}"
        record = LinkRecord(
            ensemble=PinnedModel(uri, ""),
            surrogate=PinnedModel(f"models:/other-model-surrogate/{i}", ""),
            decided_by=by,
            time=decisions.now_utc(),
        )
        decisions.record_in_new_run(
            client, decisions.LINK_EXPERIMENT, f"LINK {uri}",
            {ENSEMBLE_URI_TAG: uri}, record, key,
        )  # fmt: skip


def _govern(served: dict, *args):
    return CliRunner().invoke(app, [*args, "--tracking-uri", served["url"]], env={"COLUMNS": "200"})


COMMANDS = {
    "show": ("show", "--model-uri", MODEL),
    "gate": ("gate", "--model-uri", MODEL),
    "promote": ("promote", "--model-uri", MODEL, "--alias", "champion"),
    "audit": ("audit", "--model-name", "wisconsin-rf"),
    "approve": (
        "approve", "--model-uri", MODEL, "--alias", "champion", "--decision", "approve",
        "--comment", "reviewed",
    ),
}  # fmt: skip
"""The commands counted, in the order they run (``--policy`` and the key are added)."""


def _run(served: dict, command: str):
    args = [*COMMANDS[command], "--policy", served["policy"]]
    if command == "approve":
        args += ["--signing-key", str(key_pair(APPROVER)[0])]
    return _govern(served, *args)


def count_requests(served: dict, command: str) -> collections.Counter:
    """Run ``command`` (:data:`COMMANDS`) against the server; its requests by endpoint."""
    mark = served["log"].mark()
    done = _run(served, command)
    assert done.exit_code == 0, done.output
    return served["log"].since(mark)


def table(counts: dict) -> str:
    """Requests by endpoint, most first, for a failure message or a report."""
    return "\n".join(f"{n:4d}  {name}" for name, n in counts.most_common())


def test_each_command_makes_at_most_its_pinned_number_of_requests(served):
    measured = {}
    for command in COMMANDS:
        counts = count_requests(served, command)
        measured[command] = counts
        print(f"\n{command}: {sum(counts.values())} requests\n{table(counts)}")
    over = {c: sum(n.values()) for c, n in measured.items() if sum(n.values()) > MAX_REQUESTS[c]}
    assert not over, "\n\n".join(
        f"{c}: {sum(measured[c].values())} requests (at most {MAX_REQUESTS[c]})\n"
        + table(measured[c])
        for c in over
    )
