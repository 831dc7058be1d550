"""Fit a registered explanation again and compare it with its evidence (``govern reproduce``).

:func:`reproduce_explanation` reads a surrogate's signed, verified evidence (an ensemble
version's ``governance.surrogate`` link is followed), refuses data whose MLflow dataset
digest differs from the recorded one (a Spark table: whose row-set digest differs; its
recorded sample is collected again, :mod:`flavors.explain.spark_table`), rebuilds the
:class:`~flavors.request.ExplainRequest` from ``provenance.request`` and runs, in this
process, the explain stages that decide the tree: the ensemble loaded safely from the
files the evidence pins, when it pins them (:func:`flavors.gate_evidence.pinned_ensemble`),
:func:`flavors.stages.prepare`,
:func:`flavors.stages.fit_surrogate` (or :func:`flavors.search.search_surrogate`) and
:func:`flavors.stages.evaluate`. It creates no run, no model version and no artifact.
:class:`Reproduction` compares the tree digest, every headline metric and the software
versions; :meth:`~Reproduction.to_json` is what ``govern reproduce --json`` prints
after ``command`` and ``schema_version`` (the schema: docs/architecture.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.evidence import FLAVORS_CODE
from miret_governance.flavors.explain import spark_table, stages
from miret_governance.flavors.explain.request import ExplainRequest
from miret_governance.flavors.explain.search_runs import search_surrogate
from miret_governance.flavors.gates.gate_evidence import checked_evidence, pinned_ensemble
from miret_governance.flavors.store.data_files import digest_like, read_data
from miret_governance.flavors.store.registry import (
    linked_versions,
    resolve_model_version,
    version_uri,
)
from miret_governance.flavors.trust import trusted_keys
from miret_governance.governance.data.spark.frames import on_spark, source_name
from miret_governance.governance.data.spark.sample import TABLE_METRICS
from miret_governance.governance.measures.metrics import HEADLINE_METRICS
from miret_governance.governance.miret.solvers.table import solver_package
from miret_governance.governance.trust.environment import GUROBI, differences, environment


@dataclass(frozen=True)
class Reproduction:
    """An explanation fitted again, next to its evidence.

    Attributes
    ----------
    model_uri : str
        The URI as given (a surrogate or an explained ensemble version).
    surrogate_uri : str
        ``models:/<name>-surrogate/<version>`` whose evidence was compared.
    data_digest : str
        MLflow dataset digest of the training data (the recorded one: others are refused).
    tree_digest : dict
        ``recorded`` and ``reproduced`` :meth:`MiretSurrogate.tree_digest`.
    metrics : dict
        Headline metric -> ``recorded``, ``reproduced``, ``equal`` (exact; NaN equals NaN).
    versions_differ : dict
        Environment key -> ``recorded``, ``current``
        (:func:`governance.environment.differences`).
    time_limit_hit : dict
        ``recorded`` and ``reproduced``: whether the safety cap in seconds cut the fit
        (only then may a re-run on the same versions differ).
    signed_by : dict
        ``name`` and ``fingerprint`` of the trusted key that signed the evidence.
    ensemble_uri : str
        The explained ensemble version (``models:/<name>/<version>``).
    evidence_digest : str
        sha256 of the verified ``evidence.json`` (these two are not in :meth:`to_json`:
        what ``govern reproduce`` records, :mod:`flavors.trail.verification`).
    """

    model_uri: str
    surrogate_uri: str
    data_digest: str
    tree_digest: dict
    metrics: dict
    versions_differ: dict
    time_limit_hit: dict
    signed_by: dict
    ensemble_uri: str
    evidence_digest: str

    @property
    def identical(self) -> bool:
        """The same tree, bit for bit, and every headline metric equal."""
        same_tree = self.tree_digest["recorded"] == self.tree_digest["reproduced"]
        return same_tree and all(m["equal"] for m in self.metrics.values())

    def to_json(self) -> dict:
        """``identical``, ``model_uri``, ``surrogate_uri``, ``data_digest``,
        ``tree_digest``, ``metrics``, ``versions_differ``, ``time_limit_hit`` and
        ``signed_by``, as plain values."""
        return {
            "identical": self.identical,
            "model_uri": self.model_uri,
            "surrogate_uri": self.surrogate_uri,
            "data_digest": self.data_digest,
            "tree_digest": dict(self.tree_digest),
            "metrics": {name: dict(m) for name, m in self.metrics.items()},
            "versions_differ": {k: dict(v) for k, v in self.versions_differ.items()},
            "time_limit_hit": dict(self.time_limit_hit),
            "signed_by": dict(self.signed_by),
        }


def _equal(recorded, reproduced) -> bool:
    """Exactly equal (both NaN counts as equal: the metric is undefined in both)."""
    both_nan = all(isinstance(v, float) and math.isnan(v) for v in (recorded, reproduced))
    return both_nan or recorded == reproduced


def _checked(client: MlflowClient, ensemble, surrogate, trusted):
    """The surrogate's evidence after every check a gate makes, its signature first
    (:func:`flavors.gate_evidence.checked_evidence`; evidence from before the ensemble's
    files were pinned is fitted again too, and files changed since are refused)."""
    checked = checked_evidence(client, ensemble, surrogate, trusted, pinned=False)
    provenance = checked.provenance
    if "request" not in provenance:
        raise ExplainError(
            f"the evidence of {version_uri(surrogate)} does not record its request (it was written before "
            "govern reproduce existed), so it cannot be fitted again; explain it again: "
            f"govern explain --model-uri {version_uri(ensemble)} --data <file> --force"
        )
    return checked


def _checked_frame(given, recorded_path: str, recorded_digest: str, target, option: str):
    """The data frame of ``given``, refused unless its dataset digest is the one
    recorded (``option``: the command-line option that names the file)."""
    if not recorded_digest:
        if given is None:
            return None
        raise ExplainError(
            f"the explanation drew its test rows from the training data (no test file); "
            f"leave out {option}"
        )
    if given is None:
        raise ExplainError(
            f"the explanation was tested on a separate file (dataset digest "
            f"{recorded_digest}, read from {recorded_path}); pass it with {option}"
        )
    frame = read_data(given, target)
    digest = digest_like(frame, given, target, recorded_digest)
    if digest != recorded_digest:
        raise ExplainError(
            f"{given} is not the data of this explanation: its dataset digest is "
            f"{digest}, the recorded one is {recorded_digest}; pass the file the explain run "
            f"read ({recorded_path}) with {option}"
        )
    return frame


def _ensemble(ensemble_version, checked, trust_pickle: bool):
    """The ensemble the evidence pins, a pickle only with ``trust_pickle``.

    Raises
    ------
    ExplainError
        The explanation trusted a pickle and ``trust_pickle`` is False.
    """
    trusted_by = checked.provenance.get("trust_pickle")
    if trusted_by and not trust_pickle:  # re-logging: another version
        raise ExplainError(
            f"the explanation loaded {version_uri(ensemble_version)}, a pickled model, "
            f"trusted by {trusted_by}; loading it again runs the artifact's "
            "code: pass --trust-pickle to reproduce it"
        )
    return pinned_ensemble(ensemble_version, checked.evidence, trust_pickle)


def _sampled(data, record: dict, target, ensemble):
    """The Spark table ``data`` and the recorded sample of it, collected again.

    Raises
    ------
    ExplainError
        The explanation read a file, the table's rows differ from the recorded ones, or
        the sample's dataset digest differs from the recorded one.
    """
    recorded = ExplainRequest.from_record(record).data_source
    if recorded is None:
        raise ExplainError(
            f"the explanation read the file {record['data']} (dataset digest "
            f"{record['data_digest']}), not Spark data; pass that file with --data"
        )
    table, frame, _ = spark_table.read_sample(data, ensemble, target, recorded=recorded)
    digest = digest_like(frame, record["data"], target, record["data_digest"])
    if digest != record["data_digest"]:  # the same rows, read as other types
        raise ExplainError(
            f"the sample of {source_name(data)} has the dataset digest {digest}, the "
            f"recorded one is {record['data_digest']}: its columns are read as other types "
            "than when it was explained; read the table as the explain run did"
        )
    return table, frame


def reproduce_explanation(
    model_uri: str,
    data,
    test_data=None,
    target: str | None = None,
    trust_pickle: bool = False,
    client: MlflowClient | None = None,
    policy=None,
) -> Reproduction:
    """Fit the explanation of ``model_uri`` again and compare it with its evidence.

    Parameters
    ----------
    model_uri : str
        A surrogate version or an explained ensemble version (``models:/<name>/<version>``
        or ``models:/<name>@<alias>``).
    data, test_data : str or path
        The files the explanation was made from (``test_data`` only when it had one);
        their MLflow dataset digests must be the recorded ones. ``data`` may be the
        Spark table (a ``DataSource`` or a Spark DataFrame) of an explanation of Spark
        data: its row-set digest must be the recorded one; the recorded sample is
        collected again and the fidelity on the other rows counted again.
    target : str, optional
        Label column; default the recorded one (another one is refused).
    trust_pickle : bool
        Load an ensemble stored as pickle (it runs code from the artifact), as the
        explanation did when it recorded ``trust_pickle``.
    policy : Policy, TrustedKeys or path, optional
        Whose keys to trust for the evidence's signature (default: the policy file
        ``GOVERN_POLICY`` names).

    Returns
    -------
    Reproduction

    Raises
    ------
    GovernanceError
        Bad URI, no or untrusted evidence (:class:`~flavors.errors.GateError`), data
        with another digest, a missing file, an ensemble that cannot be loaded.
    governance.trust.keyring.SignatureError
        No trust configured; the evidence is unsigned, signed by a key not trusted for
        explain, or altered since it was signed.
    """
    trusted = trusted_keys(policy)
    client = client or MlflowClient()
    ensemble_version, surrogate_uri = linked_versions(
        client,
        model_uri,
        "there is no explanation to reproduce; explain it with "
        "`govern explain --model-uri {uri} --data <file>`",
    )
    surrogate_version = resolve_model_version(client, surrogate_uri)
    checked = _checked(client, ensemble_version, surrogate_version, trusted)
    provenance = checked.provenance
    record = provenance["request"]
    if target is not None and target != record["target"]:
        recorded = record["target"]
        raise ExplainError(
            f"the explanation used the label column {recorded!r}, not {target!r}; leave out "
            f"--target or pass --target {recorded}"
            if recorded
            else f"the explanation was made without a label column, not with {target!r}; "
            "leave out --target"
        )
    target = record["target"] or None
    table = ensemble = None
    if on_spark(data):  # its columns are checked before anything is collected
        ensemble = _ensemble(ensemble_version, checked, trust_pickle)
        table, frame = _sampled(data, record, target, ensemble)
        path = source_name(data)
    else:
        frame = _checked_frame(data, record["data"], record["data_digest"], target, "--data")
        path = str(Path(data).resolve())
    test_frame = _checked_frame(
        test_data, record["test_data"], record["test_data_digest"], target, "--test-data"
    )
    request = ExplainRequest.from_record(
        record,
        data=path,
        test_data=str(Path(test_data).resolve()) if test_frame is not None else "",
    )
    if ensemble is None:
        ensemble = _ensemble(ensemble_version, checked, trust_pickle)
    prepared = stages.prepare(request, ensemble, frame, test_frame)
    if request.search is None:
        surrogate = stages.fit_surrogate(request, prepared.ensemble, prepared.raw_train)
    else:
        surrogate = search_surrogate(request, prepared.ensemble, prepared.raw_train)
        surrogate = surrogate.best_estimator_
    metrics = stages.evaluate(
        prepared.ensemble, surrogate, prepared.X_train, prepared.X_test, prepared.data
    )
    names = list(HEADLINE_METRICS)
    if table is not None:
        metrics.update(spark_table.table_metrics(table, request.data_source, ensemble, surrogate))
        names += TABLE_METRICS
    recorded_metrics = provenance["metrics"]
    if "encoding" not in provenance and "n_encoded_features_used" in metrics:
        # evidence written before the encoding was recorded counted encoded columns
        metrics["n_features_used"] = metrics["n_encoded_features_used"]
    names = [m for m in names if m in recorded_metrics or m in metrics]
    recorded_env = provenance.get("environment") or {}
    solver = surrogate.solve_report_.solver
    current_env = environment(
        gurobi=GUROBI in recorded_env or solver_package(solver) == GUROBI, code=FLAVORS_CODE
    )
    return Reproduction(
        model_uri=model_uri,
        surrogate_uri=version_uri(surrogate_version),
        data_digest=request.data_digest,
        tree_digest={
            "recorded": provenance.get("tree_digest"),
            "reproduced": surrogate.tree_digest(),
        },
        metrics={
            name: {
                "recorded": recorded_metrics.get(name),
                "reproduced": metrics.get(name),
                "equal": _equal(recorded_metrics.get(name), metrics.get(name)),
            }
            for name in names
        },
        versions_differ=differences(recorded_env, current_env),
        time_limit_hit={
            "recorded": bool(provenance["solve"].get("time_limit_hit")),
            "reproduced": bool(surrogate.solve_report_.time_limit_hit),
        },
        signed_by=checked.signer.to_json(),
        ensemble_uri=version_uri(ensemble_version),
        evidence_digest=checked.digest,
    )
