"""One command's reads of the tracking server, made once and shared within that command.

Against an authenticated MLflow server every request costs about half a second (the
server checks the password of each), so a command's time there is its number of round
trips (issue 40: ``govern show`` made 77). The read and decide commands read the same
things from several places: the version being decided, the experiment of each decision
kind, the runs about the version (``check_trail`` reads them all; the latest link, the
approvals and the recorded drift figures read subsets of them again), the explain run
of a surrogate. :class:`CommandClient` is the ``MlflowClient`` of one command invocation
(``show``, ``gate``, ``promote``, ``approve``, ``audit``, ``clear``): it answers a read
it already made from what it read, and is dropped with the command, never shared across
commands.

What it may keep, and for how long:

- **until this client writes anything** (:data:`MEMOIZED`): runs, run searches, model
  versions (by name and number, never by alias: a promotion reads the alias holder again
  inside its lock, and must see a concurrent promotion's move) and registered models
  (the promotion lock's state is read right after the write that failed to take it),
  and what a caller derived from them (:meth:`CommandClient.remember`: the runs about a
  version, per experiment). Any other public method of the client, every write among them, empties this memo
  first, so a read after one of the command's own writes goes to the server;
- **for the whole command**: the experiments found by name (several in one search:
  :meth:`CommandClient.experiments_named`; nothing here renames or deletes one), the logged models (this reads only their experiment and source run,
  which MLflow never changes), MLflow's check that a registered name is not a prompt
  (made before each registry write), and the bytes of decision record files.

Nothing a signature covers is trusted from here: record files are handed back as the
bytes downloaded, and :func:`flavors.trail.decisions.read_record` checks them (bound
digests, parse, tags, signature) each time as it checks a download. A model directory is
downloaded by each reader that verifies it (once per command in ``show``, ``gate``,
``promote`` and ``approve``). Without a ``CommandClient`` (a library caller's
own ``MlflowClient``) every read goes to the server, as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import ViewType
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

MEMOIZED = (
    "get_run",
    "search_runs",
    "get_model_version",
    "get_registered_model",
)
"""Reads answered from the memo until this client's next write (module docstring)."""
KEPT = ("get_experiment_by_name", "get_logged_model", "_raise_if_prompt")
"""Reads kept for the whole command (module docstring)."""
PURE_READS = frozenset(
    (
        "get_experiment",
        "get_model_version_by_alias",
        "get_model_version_download_uri",
        "search_model_versions",
        "search_registered_models",
        "search_experiments",
        "get_metric_history",
        "list_artifacts",
        "download_artifacts",
        "tracking_uri",
    )
)
"""Public reads that are never memoized and do not empty the memo."""


class CommandClient(MlflowClient):
    """The ``MlflowClient`` of one command invocation (module docstring).

    Parameters are those of ``MlflowClient``.
    """

    def __init__(self, tracking_uri: str | None = None, registry_uri: str | None = None):
        super().__init__(tracking_uri, registry_uri)
        self._memo: dict = {}
        self._kept: dict = {}
        self._files: dict = {}

    def __getattribute__(self, name: str):
        attribute = object.__getattribute__(self, name)
        if name.startswith("__") or not callable(attribute):
            return attribute
        if name in MEMOIZED:
            return _memoized(self, "_memo", name, attribute, lambda value: True)
        if name in KEPT:
            keep = _found if name == "get_experiment_by_name" else lambda value: True
            return _memoized(self, "_kept", name, attribute, keep)
        if name.startswith("_") or name in PURE_READS or name in _OWN:
            return attribute
        return _writing(object.__getattribute__(self, "_memo"), attribute)

    def experiments_named(self, names) -> dict:
        """Name -> experiment of those of ``names`` that exist (deleted ones included, as
        ``get_experiment_by_name`` finds them): one search for all the names not looked up
        yet (names sharing a prefix, like the governance experiments), kept for the
        command as :meth:`get_experiment_by_name` keeps what it finds; a name not found
        is looked up again after this client's next write (which may have created it)."""
        key = lambda name: ("get_experiment_by_name", (name,), ())
        unknown = [
            name
            for name in names
            if key(name) not in self._kept and ("no experiment", name) not in self._memo
        ]
        if len(unknown) > 1:
            found = search_experiments_named(self, unknown)
            for name in unknown:
                if name in found:
                    self._kept[key(name)] = found[name]
                else:
                    self._memo[("no experiment", name)] = True
        return {
            name: experiment
            for name in names
            if ("no experiment", name) not in self._memo
            and (experiment := self.get_experiment_by_name(name)) is not None
        }

    def remember(self, key, value) -> None:
        """Keep ``value`` (what a caller derived from its reads) until the next write."""
        self._memo[("remembered", key)] = value

    def recall(self, key):
        """What :meth:`remember` kept under ``key`` since the last write (None: nothing)."""
        return self._memo.get(("remembered", key))

    # ------------------------------------------------------------------ artifacts
    def run_file(self, artifact_uri: str, path: str, local: Path) -> None:
        """Write the run artifact ``path`` (under the run's ``artifact_uri``) to ``local``,
        downloaded once per command: one request, without the listing a download of a
        folder or a ``download_artifacts`` of a file makes first.

        Raises
        ------
        OSError, MlflowException
            As the artifact repository's download (not found, unreachable).
        """
        key = (artifact_uri, path)
        if key not in self._files:
            download_run_file(artifact_uri, path, local)
            self._files[key] = local.read_bytes()
            return
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(self._files[key])


EXPERIMENT_PAGE = 1000
"""Experiments per page of an experiment search (every page is read)."""


def search_all_experiments(client: MlflowClient, filter_string: str | None = None) -> list:
    """Every experiment matching ``filter_string`` (all when None), deleted ones included,
    every page of :data:`EXPERIMENT_PAGE` read."""
    found, token = [], None
    while True:
        page = client.search_experiments(
            view_type=ViewType.ALL,
            filter_string=filter_string,
            max_results=EXPERIMENT_PAGE,
            page_token=token,
        )
        found += page
        token = page.token
        if not token:
            return found


def search_experiments_named(client: MlflowClient, names) -> dict:
    """Name -> experiment of those of ``names`` that exist, deleted ones included, from
    one search of the names' common prefix (every page read), not one lookup each."""
    prefix = re.split(r"[%_'\"\\]", os.path.commonprefix(list(names)))[0]
    found = search_all_experiments(client, f"name LIKE '{prefix}%'")
    return {e.name: e for e in found if e.name in names}


_OWN = frozenset(("run_file", "remember", "recall", "experiments_named"))


def _found(value) -> bool:
    """Whether a read is kept for the command: an experiment looked up and not found
    may be created by this very command."""
    return value is not None


def _writing(memo: dict, method):
    """``method`` (a write, or a method not known to read only) emptying ``memo`` before
    and after it runs: what MLflow reads inside a write is not kept either."""

    def write(*args, **kwargs):
        memo.clear()
        try:
            return method(*args, **kwargs)
        finally:
            memo.clear()

    return write


def _frozen(value):
    """``value`` as a key: lists and tuples as tuples, dicts as sorted item tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _memoized(client, table: str, name: str, method, keep):
    """``method`` answering from ``client``'s ``table`` what it read with the same
    arguments (and keeping what ``keep`` accepts)."""

    def read(*args, **kwargs):
        memo = object.__getattribute__(client, table)
        key = (name, _frozen(args), _frozen(kwargs))
        try:
            return memo[key]
        except TypeError:  # an argument that is not hashable: not memoized
            return method(*args, **kwargs)
        except KeyError:
            pass
        value = method(*args, **kwargs)
        if keep(value):
            memo[key] = value
        return value

    return read


def download_run_file(artifact_uri: str, path: str, local: Path) -> None:
    """Download the one file ``path`` of a run's artifacts (``artifact_uri``) to
    ``local``: the artifact repository's own single-file download, which every
    repository implements, so that a record costs one request per file."""
    local.parent.mkdir(parents=True, exist_ok=True)
    get_artifact_repository(artifact_uri)._download_file(path, str(local))


def run_file(client, artifact_uri: str, path: str, local: Path) -> None:
    """:meth:`CommandClient.run_file` with any client (a plain ``MlflowClient``
    downloads every time)."""
    if isinstance(client, CommandClient):
        client.run_file(artifact_uri, path, local)
    else:
        download_run_file(artifact_uri, path, local)
