"""``miret``: the surrogate's fidelity inside ``mlflow.models.evaluate``, opt-in.

Installed as the MLflow evaluator plugin ``miret`` (entry point group
``mlflow.model_evaluator`` in pyproject.toml). With ``evaluators=None`` MLflow asks every
installed evaluator whether it ``can_evaluate`` the model type; a MILP solve in every
classifier evaluation of the environment would be a surprise, so this one runs only when
its own config enables it::

    mlflow.models.evaluate(
        "models:/credit-rf/3", data, targets="label", model_type="classifier",
        evaluators=["default", "miret"],
        evaluator_config={"miret": {"enabled": True, "depth": 2, "time_limit": 30}},
    )

Naming it in ``evaluators=[...]`` is not enough on its own: MLflow 3 calls
``can_evaluate(model_type=..., evaluator_config=...)`` with the same arguments whether
the evaluator was named or is merely installed (``mlflow.models.evaluation.base``:
``resolve_evaluators_and_configs`` and ``_evaluate``), so the two cannot be told apart
and the config key is the one switch. Give the config nested under ``"miret"``: a flat
``evaluator_config`` is handed to every evaluator.

A Spark DataFrame is not judged on a truncated sample: MLflow hands every evaluator at
most its first :data:`SPARK_ROWS` rows (``SparkDataset.to_evaluation_dataset`` collects
``limit(10000)``), and the DataFrame itself never reaches the evaluator, so a Spark
evaluation of that many rows is refused (:func:`refuse_truncated_spark`), naming
``govern explain --data spark:<table>``, which fits on a deterministic sample and counts
the fidelity on every other row in Spark. A smaller Spark DataFrame arrived whole and is
evaluated. The evaluator tells Spark data by the run's dataset input MLflow logged for
it (source type ``spark`` or ``delta_table``, or the ``approx_count`` profile of
``mlflow.data.spark_dataset.SparkDataset``).

Config keys: ``enabled`` (True to run), ``class_names`` (one name per class, display only) and
any :class:`~governance.miret.estimator.MiretSurrogate` parameter (``depth``,
``time_limit``, ``alpha``, ...; checked as :class:`flavors.fit_params.FitParams`, defaults
the estimator's).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from mlflow import MlflowClient
from mlflow.data.evaluation_dataset import EvaluationDataset
from mlflow.entities import Metric
from mlflow.models.evaluation import EvaluationResult, ModelEvaluator
from mlflow.utils.time import get_current_time_millis

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.defaults import AUTO_DEPTH
from miret_governance.flavors.explain.fit_params import (
    FitParams,
    check_parameters,
    estimator_defaults,
)
from miret_governance.flavors.explain.request import check_class_names

_logger = logging.getLogger(__name__)

EVALUATOR_NAME = "miret"
"""The evaluator's name in ``evaluators=[...]`` and ``evaluator_config``."""
METRIC_PREFIX = "miret_"
"""Prefix of every metric the evaluator logs (none of them is read by a gate)."""
ARTIFACT_DIR = "miret"
"""The run's artifact folder of the rules, the tree figure and ``fit.json``."""
OWN_KEYS = ("enabled", "class_names")
"""Config keys that are not estimator parameters."""
SPARK_ROWS = EvaluationDataset.SPARK_DATAFRAME_LIMIT
"""Rows of a Spark DataFrame MLflow hands an evaluator at most (10,000)."""
SPARK_SOURCES = ("spark", "delta_table")
"""MLflow dataset source types of Spark data."""


def _is_spark(entity) -> bool:
    """Whether a logged dataset (``mlflow.entities.Dataset``) is a Spark DataFrame."""
    try:
        profile = json.loads(entity.profile or "null") or {}
    except ValueError:
        profile = {}
    return entity.source_type in SPARK_SOURCES or "approx_count" in profile


def refuse_truncated_spark(dataset, run_id: str) -> None:
    """Refuse ``dataset`` when it is the first :data:`SPARK_ROWS` rows of a Spark
    DataFrame (the run's logged dataset input of the same name and digest is Spark's):
    the rest never reached the evaluator.

    Raises
    ------
    ExplainError
        Naming ``govern explain --data spark:<table>``.
    """
    if len(dataset.features_data) < SPARK_ROWS:
        return  # all of it, whatever it was read from
    inputs = MlflowClient().get_run(run_id).inputs.dataset_inputs
    if any(
        d.dataset.digest == dataset.digest
        and d.dataset.name == dataset.name
        and _is_spark(d.dataset)
        for d in inputs
    ):
        raise ExplainError(
            f"the {EVALUATOR_NAME} evaluator was given a Spark DataFrame, of which MLflow hands "
            f"evaluators only the first {SPARK_ROWS:,} rows; it does not judge a truncated "
            "sample: explain the table with govern explain --data spark:<table> (a "
            "deterministic sample, fidelity counted on every other row in Spark)"
        )


def _config(evaluator_config) -> dict:
    if evaluator_config is None:
        return {}
    if not isinstance(evaluator_config, dict):
        raise ExplainError(
            f"evaluator_config[{EVALUATOR_NAME!r}] must be a dict, got "
            f"{type(evaluator_config).__name__}"
        )
    return evaluator_config


def is_enabled(evaluator_config) -> bool:
    """Whether ``evaluator_config`` (the evaluator's own) turns the evaluator on.

    Raises
    ------
    ExplainError
        ``enabled`` is given but is not True or False.
    """
    enabled = _config(evaluator_config).get("enabled", False)
    if not isinstance(enabled, bool):
        raise ExplainError(
            f"evaluator_config[{EVALUATOR_NAME!r}]['enabled'] must be True or False, got "
            f"{enabled!r}"
        )
    return enabled


def read_config(evaluator_config) -> tuple[FitParams, list | None]:
    """The estimator's parameters (checked, depth still unresolved) and the class names
    of an evaluator config.

    Raises
    ------
    ExplainError
        An unknown key, or a parameter value the estimator refuses.
    """
    config = _config(evaluator_config)
    given = {k: v for k, v in config.items() if k not in OWN_KEYS}
    accepted = sorted(set(estimator_defaults()) - {"ensemble"})
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        raise ExplainError(
            f"unknown keys {unknown} in evaluator_config[{EVALUATOR_NAME!r}]; it takes "
            f"{', '.join(OWN_KEYS)} and MiretSurrogate's parameters {accepted}"
        )
    return check_parameters(given, None), config.get("class_names")


def check_model_type(model_type) -> None:
    """Refuse a model type other than ``"classifier"`` (MIRET explains tree-ensemble
    classifiers)."""
    if model_type != "classifier":
        raise ExplainError(
            f"the {EVALUATOR_NAME} evaluator explains tree-ensemble classifiers; "
            f"model_type is {model_type!r}: pass model_type='classifier' or leave the "
            f"evaluator disabled"
        )


def evaluated_model_uri(model) -> str:
    """Where the evaluated model's artifacts are: ``models:/<model_id>``, else
    ``runs:/<run_id>/<artifact_path>`` (from the model's MLmodel).

    Raises
    ------
    ExplainError
        No model (static predictions, a plain function) or no logged model behind it.
    """
    meta = getattr(model, "metadata", None)
    if getattr(meta, "model_id", None):
        return f"models:/{meta.model_id}"
    if getattr(meta, "run_id", None) and getattr(meta, "artifact_path", None):
        return f"runs:/{meta.run_id}/{meta.artifact_path}"
    raise ExplainError(
        f"the {EVALUATOR_NAME} evaluator reads the evaluated model's trees from its logged "
        "artifacts: pass model= a logged model's URI (models:/...), not static predictions "
        "or a function"
    )


def refuse_pickle(metadata) -> None:
    """Refuse a scikit-learn model its MLmodel (``metadata``) says is a pickle, in the
    evaluator's words (``evaluator_config`` has no ``trust_pickle``): even when MLflow
    was allowed to unpickle it (``MLFLOW_ALLOW_PICKLE_DESERIALIZATION``), the surrogate
    is never fitted on a pickle's trees."""
    from miret_governance.flavors.store.inputs import SKOPS_TRUSTED_TYPES

    flavor = (getattr(metadata, "flavors", None) or {}).get("sklearn") or {}
    fmt = flavor.get("serialization_format")
    if fmt in ("pickle", "cloudpickle"):
        raise ExplainError(
            f"the scikit-learn model is stored as {fmt!r}: loading a pickle runs whatever "
            f"code the file carries, so the {EVALUATOR_NAME} evaluator refuses it. Re-log it "
            "with mlflow.sklearn.log_model(model, name='model', serialization_format='skops',"
            f" skops_trusted_types={list(SKOPS_TRUSTED_TYPES)!r})"
        )


def load_tree_ensemble(model_uri: str):
    """The ensemble behind ``model_uri``, loaded without executing code
    (:func:`flavors.inputs.load_explainable_ensemble`: skops with fixed trusted types,
    XGBoost JSON/UBJSON, LightGBM text; never pickle).

    Raises
    ------
    ExplainError
        Not a supported tree ensemble; the message names the supported families.
    """
    from miret_governance.flavors.store.inputs import load_explainable_ensemble
    from miret_governance.governance.ensembles.trees import SUPPORTED_MODELS, UnsupportedModelError

    try:
        return load_explainable_ensemble(model_uri)
    except ExplainError as exc:
        if isinstance(exc.__cause__, UnsupportedModelError):
            raise  # its message lists the supported models
        supported = "\n  - ".join(SUPPORTED_MODELS)
        raise ExplainError(
            f"the {EVALUATOR_NAME} evaluator cannot read {model_uri} as a tree ensemble: "
            f"{exc}\nSupported models (fitted classifiers):\n  - {supported}"
        ) from exc


def evaluation_features(dataset, ensemble):
    """The evaluation rows as the ensemble's features (raw units, its column order),
    clipped to the range of the ensemble's own MinMaxScaler as ``govern explain`` does.
    Missing values (NaN) are kept: the ensemble routes them by its trees' own rule, and
    the surrogate learns its rule for them (:mod:`governance.miret.missing`) in the fit.
    For an ensemble that encodes its inputs (a pipeline's ``ColumnTransformer``, native
    categorical columns) the rows hold the original columns and the result is the
    encoded view of the ensemble with the encoded rows
    (:func:`governance.encoding.encoded_view`).

    Returns
    -------
    (ensemble, ndarray)
        The ensemble the rows are features of, and the rows.

    Raises
    ------
    ExplainError
        Missing columns, a wrong column count, fewer than 2 rows, infinite values or a
        category not seen in training.
    """
    import numpy as np

    from miret_governance.governance.ensembles.arrays import feature_matrix
    from miret_governance.governance.ensembles.encoding import encoded_view
    from miret_governance.governance.miret.tree.paths import RowsError, encoded_rows

    view = encoded_view(ensemble)
    if view.encoding is not None:
        try:
            rows = encoded_rows(dataset.features_data, view.encoding, ensemble.preprocessor)
        except RowsError as exc:
            raise ExplainError(f"the evaluation data cannot be encoded: {exc}") from None
        if len(rows) < 2:
            raise ExplainError("the evaluation data needs at least 2 rows")
        return view, rows.to_numpy()
    try:
        raw = feature_matrix(
            dataset.features_data, ensemble.feature_names, min_rows=2, allow_nan=True
        )
    except ValueError as exc:
        raise ExplainError(
            f"the evaluation data cannot be read as the ensemble's features: {exc}"
        ) from None
    if ensemble.scaler is not None:
        raw = np.clip(raw, ensemble.scaler.data_min_, ensemble.scaler.data_max_)
    return ensemble, raw


def fit_and_measure(ensemble, params: FitParams, raw) -> tuple:
    """Fit ``MiretSurrogate(ensemble, **params)`` on ``raw`` and measure it there.

    Parameters
    ----------
    ensemble : governance.ensemble.Ensemble
    params : FitParams
        Depth resolved for ``ensemble``.
    raw : ndarray of shape (n, p)
        The rows in the ensemble's input units (:func:`evaluation_features`), NaN where
        a value is missing (the fit uses the complete rows, every measure all rows).

    Returns
    -------
    (MiretSurrogate, dict)
        The fitted surrogate and the ``miret_*`` metrics: ``fidelity`` (agreement with
        the ensemble on these rows, which the surrogate was fitted on),
        ``baseline_cart_fidelity`` (the depth-D CART tree on the same labels),
        ``n_features`` (original input columns of an ensemble that encodes them, a
        one-hot group once; then also ``n_encoded_features``), ``n_feature_uses``, ``depth``, ``effective_depth``, ``n_rows``
        and ``time_limit_hit`` (1: the wall-clock cap, not work, stopped the fit).
    """
    from miret_governance.governance.ensembles.arrays import scaled
    from miret_governance.governance.measures.metrics import (
        column_count,
        effective_depth,
        feature_counts,
        fidelity,
    )
    from miret_governance.governance.miret import MiretSurrogate

    X = ensemble.transform(raw)
    ensemble = ensemble.weighted_by_data(X)
    surrogate = MiretSurrogate(ensemble, **params).fit(raw)
    n_features, n_uses = feature_counts(surrogate.tree_)
    tree_inputs = scaled(surrogate.input_scaler_, raw)
    metrics = {
        "fidelity": fidelity(ensemble.predict(X), surrogate.predict(raw)),
        "baseline_cart_fidelity": surrogate.baseline_fidelity(raw),
        "n_features": float(column_count(surrogate.tree_, ensemble.encoding)),
        "n_feature_uses": float(n_uses),
        "depth": float(surrogate.tree_.depth),
        "effective_depth": float(effective_depth(surrogate.tree_, tree_inputs)),
        "n_rows": float(raw.shape[0]),
        "time_limit_hit": float(bool(surrogate.solve_report_.time_limit_hit)),
    }
    if ensemble.encoding is not None:
        metrics["n_encoded_features"] = float(n_features)
    return surrogate, {f"{METRIC_PREFIX}{k}": float(v) for k, v in metrics.items()}


def _write_artifacts(surrogate, class_names, model_uri: str, params, out: Path, encoding=None):
    """Rules, tree figure and ``fit.json`` in ``out`` (conditions in original columns
    and categories with the ensemble's ``encoding``); name -> file written."""
    from miret_governance.governance.ensembles.encoding import surrogate_display
    from miret_governance.governance.miret.tree.display import rules_text
    from miret_governance.governance.report.tree_figure import save_tree_figure
    from miret_governance.governance.report.wording import tree_kind

    display = surrogate_display(surrogate, class_names, encoding)
    rules = out / "rules.txt"
    rules.write_text(rules_text(display) + "\n", encoding="utf-8")
    png, _ = save_tree_figure(display, out, tree_kind(surrogate))
    fit = out / "fit.json"
    record = {
        "model_uri": model_uri,
        "params": dict(params),
        "class_names": list(class_names) if class_names else None,
        "tree_digest": surrogate.tree_digest(),
        "solve_report": surrogate.solve_report_.to_dict(),
        "n_rows_seen": surrogate.n_rows_seen_,
        "n_rows_used": surrogate.n_rows_used_,
    }
    fit.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return {"miret_rules": rules, "miret_tree": png, "miret_fit": fit}


def _evaluation_artifacts(files: dict, artifact_uri: str) -> dict:
    from mlflow.models.evaluation.artifacts import (
        ImageEvaluationArtifact,
        JsonEvaluationArtifact,
        TextEvaluationArtifact,
    )

    kinds = {
        "miret_rules": TextEvaluationArtifact,
        "miret_tree": ImageEvaluationArtifact,
        "miret_fit": JsonEvaluationArtifact,
    }
    artifacts = {}
    for name, path in files.items():
        artifact = kinds[name](uri=f"{artifact_uri}/{ARTIFACT_DIR}/{path.name}")
        artifact._load(str(path))  # the content, read from the file just logged
        artifacts[name] = artifact
    return artifacts


def _log_metrics(run_id: str, metrics: dict, dataset, model_id: str | None) -> None:
    """``metrics`` on the run (and the logged model ``model_id``), with the dataset."""
    timestamp = get_current_time_millis()
    MlflowClient().log_batch(
        run_id,
        metrics=[
            Metric(
                key=key,
                value=value,
                timestamp=timestamp,
                step=0,
                model_id=model_id,
                dataset_name=dataset.name,
                dataset_digest=dataset.digest,
                run_id=run_id,
            )
            for key, value in metrics.items()
        ],
    )


class MiretEvaluator(ModelEvaluator):
    """The ``miret`` evaluator: the MIRET surrogate of the evaluated tree ensemble.

    It fits :class:`~governance.miret.estimator.MiretSurrogate` on the evaluation rows
    and logs its fidelity to the ensemble, its features and its rules. It decides
    nothing: promotion decisions stay with ``govern gate``, which trusts only the signed
    evidence of ``govern explain``; no gate reads what this evaluator logs. Its fidelity
    is measured on the rows the surrogate was fitted on (``govern explain`` measures
    ``test_fidelity`` on held-out rows).

    Notes
    -----
    ``mlflow.models.evaluate`` loads the model through pyfunc before any evaluator runs
    (MLflow's own loading, with the skops types the model's MLmodel lists). This
    evaluator does not use that object: it reads the trees again from the logged
    artifacts through :func:`load_tree_ensemble`, which never unpickles.
    """

    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        """True only when ``evaluator_config`` enables the evaluator (see the module).

        Raises
        ------
        ExplainError
            Enabled, but for a model type other than ``"classifier"`` or with a bad
            config (refused before any evaluator runs).
        """
        if not is_enabled(evaluator_config):
            return False
        check_model_type(model_type)
        read_config(evaluator_config)
        return True

    def evaluate(
        self,
        *,
        model_type,
        dataset,
        run_id,
        evaluator_config,
        model=None,
        model_id=None,
        **kwargs,
    ) -> EvaluationResult:
        """Fit the surrogate on ``dataset``'s features and log it to the run: ``miret_*``
        metrics (also on the evaluated logged model, with the dataset) and artifacts in
        ``miret/`` (``rules.txt``, ``surrogate_tree.png`` and ``.svg``, ``fit.json``).

        MLflow logs the returned metrics itself when it knows the evaluated model's id
        (``model_id``); otherwise they are logged here, on the model the MLmodel names.

        Raises
        ------
        ExplainError
            No logged model, not a supported tree ensemble, data without the
            ensemble's features, the first rows of a larger Spark DataFrame
            (:func:`refuse_truncated_spark`), or a bad config.
        """
        check_model_type(model_type)
        params, names = read_config(evaluator_config)
        refuse_truncated_spark(dataset, run_id)
        model_uri = evaluated_model_uri(model)
        refuse_pickle(model.metadata)
        ensemble, raw = evaluation_features(dataset, load_tree_ensemble(model_uri))
        params = params.for_ensemble(ensemble)
        class_names = check_class_names(names, ensemble)
        _logger.info(
            "miret evaluator: fitting a depth-%s surrogate of %s on %d rows (time limit %s s)",
            AUTO_DEPTH if params.depth is None else params.depth,
            model_uri,
            raw.shape[0],
            params.time_limit,
        )
        surrogate, metrics = fit_and_measure(ensemble, params, raw)
        client = MlflowClient()
        with tempfile.TemporaryDirectory(prefix="miret-evaluator-") as folder:
            files = _write_artifacts(
                surrogate, class_names, model_uri, params, Path(folder), ensemble.encoding
            )
            client.log_artifacts(run_id, folder, artifact_path=ARTIFACT_DIR)
            artifact_uri = client.get_run(run_id).info.artifact_uri
            artifacts = _evaluation_artifacts(files, artifact_uri)
        if model_id is None:  # else MLflow logs the returned metrics to run and model
            _log_metrics(run_id, metrics, dataset, model.metadata.model_id)
        return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)
