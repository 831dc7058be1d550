"""What an explain run tells people about itself, besides its numbers.

- Where it lands: :func:`explain_experiment`, the experiment the caller chose, else the
  ensemble's own (every explanation of a version, with or without ``--search``, lands
  next to the run that trained it).
- What it is called and says: :func:`logged_model_name` (``<ensemble>-v<version>-miret``),
  :func:`model_description` and :func:`run_description` (Markdown that MLflow shows as
  the logged model's and the run's description, numbers rounded for people).
- Which data its metrics describe: :func:`record_holdout` logs the holdout's test rows as
  an MLflow dataset of their own, so test metrics are never filed under the training file.
- Class names: :func:`linked_class_names` reads those of the surrogate the ensemble
  version links, so an explanation without ``--class-names`` names the classes as the
  earlier one did.
- No local folders in anything logged: files are named by :func:`file_name`, the tracking
  store by :func:`portable_uri`, the program by :func:`source_tags`.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path, PurePath
from urllib.parse import urlsplit, urlunsplit

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.tracking import fluent
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NOTE, MLFLOW_SOURCE_NAME

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.explain.defaults import DEPTH_CHOSEN
from miret_governance.flavors.explain.stages import log_dataset
from miret_governance.flavors.store.data_files import dataset
from miret_governance.flavors.store.registry import (
    SURROGATE_TAG,
    markdown_literal,
    model_id_of,
    resolve_model_version,
    version_link,
)
from miret_governance.governance.measures.metrics import fidelity_with_interval

DESCRIPTION_TAG = MLFLOW_RUN_NOTE
"""The tag MLflow shows as the description of a run and of a logged model."""
HYPERPARAMETER_NAMES = {
    "depth": "depth",
    "alpha": "alpha",
    "gamma_percentile": "h (gamma_percentile)",
    "proximity_threshold": "m (proximity_threshold)",
}
"""The hyperparameters a reviewer reads, with the paper's letters."""


# ------------------------------------------------------------------ where and what
def explain_experiment(client: MlflowClient, version) -> str:
    """The experiment of an explain run of ensemble ``version``: the one the caller chose
    (``mlflow.set_experiment``, ``MLFLOW_EXPERIMENT_NAME`` or ``MLFLOW_EXPERIMENT_ID``),
    else the active experiment of the run that logged the ensemble, else MLflow's default.
    """
    chosen = fluent._active_experiment_id or fluent._get_experiment_id_from_env()
    if chosen:
        return chosen
    model_id = model_id_of(version)
    try:
        if version.run_id:
            experiment_id = client.get_run(version.run_id).info.experiment_id
        elif model_id:
            experiment_id = client.get_logged_model(model_id).experiment_id
        else:
            return fluent._get_experiment_id()
        if client.get_experiment(experiment_id).lifecycle_stage == "active":
            return experiment_id
    except MlflowException:  # the ensemble's run was deleted for good
        pass
    return fluent._get_experiment_id()


def logged_model_name(ensemble_name: str, ensemble_version) -> str:
    """``<ensemble>-v<version>-miret``: the surrogate's logged-model name (characters
    MLflow refuses in such names become ``-``)."""
    safe = "".join("-" if c in "/:.%\"'" else c for c in ensemble_name)
    return f"{safe}-v{ensemble_version}-miret"


def linked_class_names(client: MlflowClient, version) -> tuple | None:
    """The class names the surrogate linked to ensemble ``version`` was explained with
    (its run's ``class_names`` param); None when there is none or it had none."""
    link = version.tags.get(SURROGATE_TAG)
    if not link:
        return None
    try:
        surrogate = resolve_model_version(client, link)
        names = client.get_run(surrogate.run_id).data.params.get("class_names", "")
    except (GovernanceError, MlflowException):
        return None
    return tuple(names.split(",")) if names else None


def record_holdout(request, data, datasets: dict) -> dict:
    """Log the holdout's test rows (with their labels) as the run's ``testing`` input,
    the MLflow dataset ``<file>-holdout``, and return ``datasets`` with it; unchanged
    when a test file was given (it is the ``testing`` dataset already)."""
    if request.test_data:
        return datasets
    frame = data.test
    if data.y_test is not None:
        frame = frame.assign(**{request.target: data.y_test})
    stem = Path(request.data).stem if request.data_source is None else request.data
    holdout = dataset(frame, request.data, request.target, name=f"{stem}-holdout")
    with warnings.catch_warnings():  # integer-column schema hints of the label column
        warnings.simplefilter("ignore", UserWarning)
        log_dataset(holdout, "testing")
    return {**datasets, "testing": holdout}


# ------------------------------------------------------------------ no local folders
def file_name(path) -> str:
    """The name of a file without its folders (``""`` stays ``""``)."""
    return Path(path).name if path else ""


def portable_uri(uri: str) -> str:
    """A tracking URI as it may be logged: a server's without credentials, a local
    store by its file name only (``local sqlite store mlflow.db``)."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file", "sqlite"):
        return f"local {parts.scheme or 'file'} store {PurePath(parts.path).name}"
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def source_tags() -> dict:
    """``mlflow.source.name`` as the program's name: MLflow would log its full path."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "<console>"
    return {MLFLOW_SOURCE_NAME: program}


# ------------------------------------------------------------------ descriptions
def _code(text) -> str:
    """User text as a Markdown code span (its backticks become quotes)."""
    quoted = str(text).replace("`", "'")
    return f"`{quoted}`"


def _percent(value) -> str:
    return f"{100 * float(value):.1f}%"


def chosen_text(parameters: dict) -> str:
    """The hyperparameters a search chose, for people (``""`` without a search):
    ``alpha 0.8, h (gamma_percentile) 33.33, m (proximity_threshold) 0.9, depth 2``.

    ``parameters``: an explain run's params (the search's grid in ``search.grid``).
    """
    from miret_governance.governance.report.formatting import format_number

    grid = parameters.get("search.grid")
    if not grid:
        return ""
    names = [n for n in HYPERPARAMETER_NAMES if n in json.loads(grid)] + ["depth"]
    shown = []
    for name in dict.fromkeys(names):
        value = parameters.get(DEPTH_CHOSEN if name == "depth" else name)
        value = parameters.get(name) if value is None else value
        try:
            value = float(value)
        except (TypeError, ValueError):
            pass
        shown.append(f"{HYPERPARAMETER_NAMES[name]} {format_number(value)}")
    return ", ".join(shown)


def _facts(request, evidence, solve: dict, ensemble) -> list[str]:
    """The bullet points both descriptions share."""
    from miret_governance.governance.report.formatting import format_number
    from miret_governance.governance.report.wording import describe_stop, table_fidelity_text

    metrics = evidence.metrics
    fidelity = fidelity_with_interval(metrics)
    line = f"**Test fidelity** {fidelity} to the ensemble" if fidelity else "**No test rows**"
    if "train_fidelity" in metrics:
        line += f"; train {_percent(metrics['train_fidelity'])}"
    if "baseline_cart_test_fidelity" in metrics:
        line += (
            f"; the depth-{evidence.depth} CART baseline "
            f"{_percent(metrics['baseline_cart_test_fidelity'])} on the same test rows"
        )
    used = int(metrics.get("n_features_used", 0))
    data = f"{_code(file_name(request.data))} (digest {_code(request.data_digest)})"
    table = request.data_source
    if table is not None:
        data = (
            f"{_code(table.identity)} (row-set digest {_code(table.row_set_digest)}), the "
            f"{table.sample_rows:,} of its {table.table_rows:,} rows of smallest row hash "
            f"(digest {_code(request.data_digest)})"
        )
        if table_fidelity_text(metrics):
            line += f"; on its other rows {table_fidelity_text(metrics)}"
    if request.test_data:
        rows = (
            f"{data}, {evidence.n_train} rows fitted; test file "
            f"{_code(file_name(request.test_data))} (digest "
            f"{_code(request.test_data_digest)}), {evidence.n_test} rows"
        )
    else:
        rows = (
            f"{data}: {evidence.n_train} rows fitted, {evidence.n_test} held out as test rows "
            f"(stratified {format_number(100 * request.test_size)}%, seed {request.seed})"
        )
    params = evidence.params(request)
    chosen = chosen_text(params)
    if chosen:
        options = request.search.options()
        how = (
            f"{chosen}, chosen by {options['cv']}-fold cross-validation over "
            f"{evidence.search.n_candidates} candidates"
        )
    else:
        # the values the fit chose for those left open
        grid = {**(solve.get("grid") or {}), "depth": evidence.depth}
        how = ", ".join(
            f"{label} {format_number(request.fit[name])}"
            if request.fit[name] is not None
            else f"{label} {format_number(grid.get(name))} (chosen on held-out folds)"
            for name, label in HYPERPARAMETER_NAMES.items()
        )
    names = ", ".join(markdown_literal(n) for n in request.class_names or ())
    return [
        line,
        f"**Features used**: {_columns(used, metrics, ensemble)}",
        f"**Data**: {rows}",
        f"**Hyperparameters**: {how}",
        f"**Solver**: {describe_stop(solve)}",
        f"**Input validation**: {evidence.validation.status}"
        + (f"; **classes**: {names}" if names else ""),
    ]


def _columns(used: int, metrics: dict, ensemble) -> str:
    """``used`` of the ensemble's features; of a pipeline's or native categorical
    columns, in original input columns with the encoded columns after."""
    if ensemble.encoding is None or "n_encoded_features_used" not in metrics:
        return f"{used} of {ensemble.n_features}"
    inputs = len(ensemble.encoding.described())
    encoded = int(metrics["n_encoded_features_used"])
    return (
        f"{used} of {inputs} input columns ({encoded} of {ensemble.n_features} encoded "
        "columns: the one-hot columns of a categorical column count once)"
    )


def _ensemble(request) -> str:
    return (
        f"**{markdown_literal(request.ensemble_name)}** version {request.ensemble_version} "
        f"({_code(request.ensemble_uri)}, {_code(request.ensemble_source)})"
    )


def model_description(request, evidence, solve: dict, ensemble) -> str:
    """The logged surrogate's description (Markdown): what it is, of which ensemble
    version, on which data, how faithful, with which parameters."""
    head = (
        f"MIRET surrogate of {_ensemble(request)}: a depth-{evidence.depth} decision "
        "tree with few (possibly oblique) splits that imitates the ensemble's predictions, "
        "for review before promotion. The report is `report.html` among its artifacts."
    )
    return "\n".join(
        [head, "", *(f"- {fact}" for fact in _facts(request, evidence, solve, ensemble))]
    )


def started_description(request) -> str:
    """The explain run's description while it runs (and if it fails)."""
    return (
        f"Explain run of {_ensemble(request)} on "
        f"{_code(file_name(request.data))}: input validation, VITE and a "
        "MIRET surrogate tree."
    )


def run_description(request, evidence, solve: dict, ensemble, model: str, registered) -> str:
    """The finished explain run's description (Markdown): the logged model ``model``,
    the registered version ``registered`` and the facts of :func:`model_description`."""
    head = (
        f"Explain run of {_ensemble(request)}: VITE and a MIRET surrogate, logged as the "
        f"model {_code(model)} and registered as "
        f"{version_link(registered.name, registered.version)}."
    )
    return "\n".join(
        [head, "", *(f"- {fact}" for fact in _facts(request, evidence, solve, ensemble))]
    )


def candidate_description(index: int, total: int, params: dict, values: dict, cv: int) -> str:
    """A search candidate's run description: its parameters and validation results."""
    from miret_governance.governance.report.formatting import format_number

    shown = ", ".join(
        f"{HYPERPARAMETER_NAMES.get(k, k)} {format_number(v)}" for k, v in params.items()
    )
    return (
        f"Candidate {index} of {total} of the hyperparameter search ({shown}): mean "
        f"validation fidelity {_percent(values['mean_validation_fidelity'])} "
        f"(std {_percent(values['std_validation_fidelity'])}) with "
        f"{format_number(values['mean_n_features'], 3)} features on average over {cv} folds."
    )
