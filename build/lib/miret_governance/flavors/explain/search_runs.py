"""The ``--search`` path of an explain run: choose alpha, h and m by cross-validation.

:func:`search_surrogate` fits :class:`governance.miret.MiretSearchCV` (the paper's
k-fold selection, then a refit with the full time limit); :func:`log_search` records
every candidate as a nested child run of the explain run, so MLflow's run comparison
shows the trade-off between validation fidelity and features, and draws it for the
reviewer's page.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
from mlflow.entities import Metric

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.context import candidate_description, source_tags
from miret_governance.flavors.explain.stages import log_params, notify, solve_progress


def search_surrogate(request, ensemble, raw_train, progress=None):
    """Choose alpha, h and m by ``MiretSearchCV`` on ``raw_train`` (each candidate with
    the short search time limit), then refit the chosen ones with ``request.fit.time_limit``;
    ``progress`` sees the search, then the refit's solver like :func:`fit_surrogate`.

    Returns
    -------
    governance.miret.MiretSearchCV
        Fitted; ``best_estimator_`` is the surrogate.
    """
    from sklearn.model_selection import ParameterGrid

    from miret_governance.governance.miret import MiretSearchCV, MiretSurrogate
    from miret_governance.governance.miret.fit.search_cv import PAPER_GRID

    options = request.search.options()
    if options["backend"] == "ray":
        connect_ray(options["ray_address"])
    search = MiretSearchCV(MiretSurrogate(ensemble, **request.fit), **options)
    n_candidates = len(ParameterGrid(options["param_grid"] or PAPER_GRID))
    notify(progress, "search", {"candidates": n_candidates, "folds": options["cv"]})
    return search.fit(raw_train, progress=solve_progress(progress))


def _ray_token_available() -> bool:
    """Ray's own rule for a token: ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token"
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or Path(path).is_file()


def connect_ray(address: str | None) -> None:
    """Connect this process to the Ray cluster at ``address`` (None: a local Ray; the
    CLI passes ``--ray-address``, whose default is ``RAY_ADDRESS``).

    ``ray start --head`` enables token authentication when a token exists, but Ray's
    driver never sends one to an explicit address unless ``RAY_AUTH_MODE=token``. When
    ``RAY_AUTH_MODE`` is unset, Ray is not imported yet and a token is available, token
    mode is switched on here (a cluster without authentication accepts it too).

    Raises
    ------
    ExplainError
        Ray is not installed, or the cluster cannot be reached (the message names the
        authentication settings).
    """
    explicit = address not in (None, "", "auto")
    unset = "RAY_AUTH_MODE" not in os.environ and "ray" not in sys.modules
    if explicit and unset and _ray_token_available():
        os.environ["RAY_AUTH_MODE"] = "token"
    try:
        import ray
    except ImportError as exc:
        raise ExplainError("--backend ray needs Ray: pip install 'miret-governance[ray]'") from exc

    if ray.is_initialized():
        return
    try:
        # "local": a Ray of this process, never a stale cluster file's (as MiretSearchCV)
        ray.init(address=address or "local")
    except ConnectionError as exc:
        raise ExplainError(
            f"cannot connect to the Ray cluster at {address}: {exc}. If the cluster uses "
            "token authentication (Ray's default for `ray start --head`), run with "
            "RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN or "
            "~/.ray/auth_token (`ray get-auth-token` on the head node prints it); "
            f"RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE', 'unset')} here"
        ) from exc


@dataclass(frozen=True)
class SearchSummary:
    """What :func:`log_search` recorded: the chosen parameters, the rule, the figure."""

    chosen: dict
    rule: str
    n_candidates: int
    figure: Path
    chosen_run_id: str


def log_search(search, out: Path) -> SearchSummary:
    """Log every candidate of a fitted ``MiretSearchCV`` as a nested child run of the
    active run (its parameters; mean and std validation fidelity and features; fit
    time; share of folds cut by the time limit), the rule and the chosen parameters
    (under their own names) on the parent, and draw the trade-off.
    """
    from miret_governance.governance.report.search_figure import candidate_label, save_search_figure

    results = search.cv_results_
    client = mlflow.MlflowClient()
    chosen_run_id = ""
    total = len(results["params"])
    experiment_id = mlflow.active_run().info.experiment_id  # the parent's, not the default
    for index, params in enumerate(results["params"]):
        chosen = index == search.best_index_
        name = f"candidate {index + 1}: {candidate_label(params)}"
        values = {
            "mean_validation_fidelity": results["mean_test_fidelity"][index],
            "std_validation_fidelity": results["std_test_fidelity"][index],
            "mean_n_features": results["mean_test_n_features"][index],
            "std_n_features": results["std_test_n_features"][index],
            "mean_fit_time_s": results["mean_fit_time"][index],
            "time_limit_hit_share": results["mean_test_time_limit_hit"][index],
        }
        description = candidate_description(index + 1, total, params, values, search.cv)
        with mlflow.start_run(
            experiment_id=experiment_id,
            run_name=name,
            nested=True,
            tags=source_tags(),
            description=description,
        ) as child:
            mlflow.log_params(params)
            run_id = child.info.run_id
            client.log_batch(
                run_id,
                metrics=[
                    Metric(k, float(v), int(time.time() * 1000), 0) for k, v in values.items()
                ],
            )
            mlflow.set_tag("governance.search.chosen", str(chosen).lower())
        chosen_run_id = run_id if chosen else chosen_run_id
    rule = search.selection_rule_
    log_params(search.best_params_)
    mlflow.set_tags(
        {
            "governance.search.rule": rule,
            "governance.search.chosen_run_id": chosen_run_id,
            "governance.search.reproducible": str(search.reproducible_).lower(),
        }
    )
    figure = save_search_figure(results, search.best_index_, search.tolerance, out / "figures")
    return SearchSummary(
        dict(search.best_params_), rule, len(results["params"]), figure, chosen_run_id
    )


def search_context(search: SearchSummary | None) -> dict:
    """The report's view of a hyperparameter search (empty without one)."""
    if search is None:
        return {}
    return {
        "rule": search.rule,
        "chosen": search.chosen,
        "n_candidates": search.n_candidates,
        "figure": search.figure,
    }
