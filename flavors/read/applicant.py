"""Given rows followed through an explained ensemble's surrogate (``govern explain-row``).

The model URI names an explained ensemble version (its ``governance.surrogate`` link is
followed) or a surrogate version (its ``governance.surrogate_of`` link names the
ensemble). The surrogate is read only once its signature verifies with a key the policy
trusts for ``explain`` (:func:`flavors.miret.open_model_dir`); the ensemble is loaded
without executing code, from files whose digest its evidence pins
(:func:`flavors.gate_evidence.explained_ensemble`). Each row's
path comes from :func:`governance.miret.paths.row_paths`.

On Spark data (``spark:<table>``, a path Spark reads, or a Spark DataFrame) a Spark SQL
condition selects the rows in Spark and at most ``limit``
(:data:`governance.data.spark.ROW_LIMIT`) are collected, numbered in the order of their
row hashes (:func:`governance.data.spark.rows.selected_rows`); they are then explained as
the rows of a file.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from mlflow import MlflowClient

from miret_governance.flavors import miret as miret_flavor
from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.gates.gate_evidence import explained_ensemble
from miret_governance.flavors.store.data_files import read_table
from miret_governance.flavors.store.registry import (
    EXPLAIN_FIRST,
    download_model,
    linked_versions,
    version_uri,
)
from miret_governance.flavors.trail.links import check_presented
from miret_governance.flavors.trust import trusted_keys
from miret_governance.governance.data.spark import ROW_LIMIT
from miret_governance.governance.data.spark.frames import on_spark, source_name, spark_frame
from miret_governance.governance.ensembles.encoding import encoding_of
from miret_governance.governance.miret.tree.missing import check_missing_rule
from miret_governance.governance.miret.tree.paths import encoded_rows, feature_rows, row_paths


@dataclass(frozen=True)
class ExplainedRows:
    """The rows of a file followed through a surrogate.

    Attributes
    ----------
    surrogate_uri, ensemble_uri : str
        ``models:/name/version`` of both.
    signer : governance.trust.keyring.Signer
        The trusted key that signed the surrogate.
    paths : list of governance.miret.paths.RowPath
        One per row of the file, in file order (Spark rows: in row-hash order).
    """

    surrogate_uri: str
    ensemble_uri: str
    signer: object
    paths: list

    @property
    def n_disagree(self) -> int:
        """Rows where surrogate and ensemble disagree."""
        return sum(not p.agrees for p in self.paths)


def _rows(data, where: str | None, limit: int):
    """The rows to explain and their source's name in messages."""
    if on_spark(data):
        from miret_governance.governance.data.spark.rows import selected_rows

        name = source_name(data)
        return selected_rows(spark_frame(data), where, limit, name), name
    return read_table(data), Path(data).name


def explain_rows(
    model_uri: str,
    data,
    policy=None,
    client: MlflowClient | None = None,
    where: str | None = None,
    limit: int = ROW_LIMIT,
):
    """Follow every row of ``data`` through the surrogate of ``model_uri``.

    Parameters
    ----------
    model_uri : str
        An explained ensemble version or a surrogate version (``models:/...``).
    data : str or path
        CSV or Parquet file with the ensemble's feature columns in raw units (other
        columns, such as the label, are ignored); for a pipeline whose
        ``ColumnTransformer`` encodes categories, its original columns (category strings
        and raw numbers), and the paths name those columns and categories. A missing
        value (empty, NaN) follows each model's rule for one. Or Spark data
        (:class:`governance.data.spark.frames.DataSource` or a Spark DataFrame).
    policy : Policy, TrustedKeys or path, optional
        Whose keys to trust for ``explain`` (default: the policy ``GOVERN_POLICY`` names).
    client : MlflowClient, optional
    where : str, optional
        Spark data only: a Spark SQL condition selecting the rows (default: all).
    limit : int
        Spark data only: the most rows explained; more selected is refused.

    Returns
    -------
    ExplainedRows

    Raises
    ------
    governance.trust.keyring.SignatureError
        No trust configured, or the surrogate is unsigned, signed by an untrusted key or
        altered since it was signed.
    governance.miret.paths.RowsError
        The file lacks feature columns, holds text or infinite values in a numeric
        column, or a category not seen in training (column, value and the categories
        seen in training named).
    governance.miret.missing.NoMissingRuleError
        Rows with a missing value, for a surrogate of format version 1 (no rule for one).
    ExplainError
        Unreadable file, unexplained version, or an ensemble that cannot be loaded safely;
        ``where`` with a file.
    governance.data.tables.TableError
        Spark data: no session, an unknown table, a condition Spark cannot evaluate, or
        more than ``limit`` rows selected.
    GateError
        The evidence names another ensemble version, the ensemble's files changed since,
        or the link tag was moved by hand since the latest signed link.
    """
    if where is not None and not on_spark(data):  # pandas never evaluates expressions
        raise ExplainError(
            f"--where {where!r} selects rows of Spark data only; give --data spark:<table> "
            "(or a path with --engine spark), or a file of just the rows to explain"
        )
    trusted = trusted_keys(policy)
    client = client or MlflowClient()
    ensemble_version, surrogate_uri = linked_versions(client, model_uri, EXPLAIN_FIRST)
    with tempfile.TemporaryDirectory(prefix="surrogate-") as tmp:
        local = download_model(surrogate_uri, tmp)
        verified = miret_flavor.open_model_dir(local, trusted, surrogate_uri)
    provenance = verified.manifest["provenance"]
    check_presented(client, model_uri, ensemble_version, trusted)
    ensemble = explained_ensemble(surrogate_uri, provenance, ensemble_version)
    tree = getattr(verified.surrogate, "tree_", verified.surrogate)
    ensemble_uri = version_uri(ensemble_version)
    frame, source = _rows(data, where, limit)
    encoding = encoding_of(ensemble.preprocessor)
    if encoding is None:
        rows = feature_rows(frame, tree.feature_names, source)
        labels = ensemble.predict(ensemble.transform(rows))
    else:  # original columns with category strings: the surrogate's encoded columns
        rows = encoded_rows(frame, encoding, ensemble.preprocessor, source)
        labels = ensemble.predict(rows)
    check_missing_rule(tree, rows, surrogate_uri, rows.index)
    record = provenance.get("request") or {}
    paths = row_paths(
        tree,
        rows,
        labels,
        scaler=verified.scaler,
        class_names=record.get("class_names"),
        encoding=encoding,
    )
    return ExplainedRows(surrogate_uri, ensemble_uri, verified.signer, paths)
