"""One explain request: what the caller asked for, with every default filled in.

:class:`ExplainRequest` is built once by :func:`flavors.explain.explain_model_version`
(or rebuilt from a surrogate's evidence by :mod:`flavors.reproduce`) and handed, frozen,
to every stage of :mod:`flavors.stages`. It holds the estimator's parameters as one
object, :class:`flavors.fit_params.FitParams`, checked by
:func:`flavors.fit_params.check_parameters`; :func:`check_search` and
:func:`check_class_names` refuse the request's other bad values before any work.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields

import numpy as np

from miret_governance.flavors.errors import ExplainError
from miret_governance.flavors.explain.defaults import AUTO_DEPTH, MIN_TEST_ROWS
from miret_governance.flavors.explain.fit_params import HYPERPARAMETERS, FitParams
from miret_governance.flavors.store.registry import URI_PREFIX
from miret_governance.governance.data.spark.sample import TableSample


def search_defaults() -> dict:
    """``MiretSearchCV``'s defaults (cv, tolerance, search time limit, backend, ...)."""
    from miret_governance.governance.miret import MiretSearchCV

    return {k: v for k, v in MiretSearchCV(None).get_params().items() if k != "estimator"}


@dataclass(frozen=True)
class SearchSettings:
    """How ``--search`` chooses alpha, h and m (:class:`governance.miret.MiretSearchCV`).

    Attributes
    ----------
    param_grid : dict, optional
        Parameter name -> candidate values; None: the paper's grid.
    cv, tolerance, search_time_limit, n_jobs, backend, ray_address
        ``MiretSearchCV``'s options (``None`` takes :func:`search_defaults`'s value for
        ``cv``, ``tolerance`` and ``search_time_limit``).
    """

    param_grid: dict | None = None
    cv: int | None = None
    tolerance: float | None = None
    search_time_limit: float | None = None
    n_jobs: int | None = None
    backend: str = "loky"
    ray_address: str | None = field(default=None, compare=False)

    def grid(self) -> dict:
        """The grid searched: ``param_grid`` or the paper's."""
        from miret_governance.governance.miret.fit.search_cv import PAPER_GRID

        return dict(PAPER_GRID if self.param_grid is None else self.param_grid)

    def options(self) -> dict:
        """Keyword arguments of ``MiretSearchCV`` (the estimator apart)."""
        defaults = search_defaults()
        given = {
            "param_grid": self.param_grid,
            "cv": self.cv,
            "tolerance": self.tolerance,
            "search_time_limit": self.search_time_limit,
        }
        chosen = {k: defaults[k] if v is None else v for k, v in given.items()}
        return {
            **chosen,
            "n_jobs": self.n_jobs,
            "backend": self.backend,
            "ray_address": self.ray_address,
        }

    def identity(self) -> dict:
        """What changes the chosen tree (not where or how parallel it runs)."""
        options = self.options()
        return {k: options[k] for k in ("param_grid", "cv", "tolerance", "search_time_limit")}

    def params(self) -> dict:
        """Run parameters ``search.*``."""
        options = self.options()
        return {
            "search.grid": json.dumps(self.grid(), sort_keys=True),
            "search.cv": options["cv"],
            "search.tolerance": options["tolerance"],
            "search.time_limit": options["search_time_limit"],
            "search.n_jobs": options["n_jobs"] if options["n_jobs"] is not None else "",
            "search.backend": options["backend"],
        }


@dataclass(frozen=True)
class ExplainRequest:
    """Everything one explain run is asked to do, resolved and checked.

    Attributes
    ----------
    model_uri : str
        The URI as the caller gave it (an alias is allowed).
    ensemble_name, ensemble_version : str
        The registry version it resolved to.
    ensemble_source : str
        The ensemble's model class, as :class:`governance.ensemble.Ensemble` reads it.
    ensemble_model_id : str
        The ensemble's LoggedModel id ("" when the registry has none).
    data, test_data : str
        The data files' names, never their folders (``test_data`` "" for a holdout split).
    data_digest, test_data_digest : str
        MLflow dataset digests ("" when there is no test file).
    target : str
        Label column ("": the ensemble's own labels stand in).
    test_size : float or None
        Holdout share (None when a test file is given).
    registered_name : str
        Registered model of the surrogate.
    fit : FitParams
        The estimator's parameters, depth resolved for the ensemble (None: chosen on
        held-out folds, ``--depth auto``): ``time_limit`` is
        the budget of the whole fit, ``max_rows`` the largest sample the MILP works on,
        ``random_state`` (:attr:`seed`) also seeds the holdout split.
    allow_invalid : bool
    class_names : tuple of str, optional
        Names of the ensemble's classes, one per class, for the reviewer's tree (display
        only).
    search : SearchSettings, optional
        Choose alpha, h and m by cross-validation (the request's values are the
        starting point the grid overrides).
    trust_pickle : str
        "" unless a pickled ensemble was loaded on the caller's explicit trust; then
        who trusted it and when (``"<user> at <UTC time>"``).
    min_test_rows : int
        Fewest test rows per class the explanation accepts (:data:`MIN_TEST_ROWS`
        unless lowered explicitly; recorded as a run param and in the provenance).
    ensemble_files_digest : str
        :func:`flavors.evidence.model_files_digest` of the ensemble's model files as
        explain read them; a gate refuses the evidence once the version's files differ
        ("" only in evidence written before it was recorded).
    data_source : TableSample, optional
        The Spark table ``data`` names and which of its rows were collected to be
        explained (``data_digest`` is theirs); None for a file. Recorded only when set,
        so explanations of files keep their bytes and digests.
    """

    model_uri: str
    ensemble_name: str
    ensemble_version: str
    ensemble_source: str
    ensemble_model_id: str
    data: str
    data_digest: str
    test_data: str
    test_data_digest: str
    target: str
    test_size: float | None
    registered_name: str
    fit: FitParams
    allow_invalid: bool
    class_names: tuple | None = None
    trust_pickle: str = ""
    search: SearchSettings | None = None
    min_test_rows: int = MIN_TEST_ROWS
    ensemble_files_digest: str = ""
    data_source: TableSample | None = None

    @property
    def ensemble_uri(self) -> str:
        """``models:/<name>/<version>`` of the ensemble version."""
        return f"{URI_PREFIX}{self.ensemble_name}/{self.ensemble_version}"

    @property
    def seed(self) -> int:
        """Seed of the holdout split, the heuristic and the solver (``random_state``)."""
        return self.fit.random_state

    def hyperparameters(self) -> dict:
        """The MIRET hyperparameters by name (:data:`HYPERPARAMETERS`)."""
        return {name: self.fit[name] for name in HYPERPARAMETERS}

    @property
    def digest(self) -> str:
        """What makes two requests the same explanation (ensemble, data, parameters)."""
        identity = {
            "ensemble_uri": self.ensemble_uri,
            "data_digest": self.data_digest,
            "test_data_digest": self.test_data_digest or None,
            "target": self.target,
            "test_size": self.test_size,
            "allow_invalid": self.allow_invalid,
            "min_test_rows": self.min_test_rows,
            "fit": self.fit.identity(),
        }
        if self.search is not None:
            identity["search"] = self.search.identity()
        if self.ensemble_files_digest:  # absent from older evidence: its digest stands
            identity["ensemble_files_digest"] = self.ensemble_files_digest
        if self.data_source is not None:  # the whole table: its fidelity is evidence too
            identity["data_source"] = self.data_source.to_json()
        text = json.dumps(identity, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def params(self) -> dict:
        """The run parameters that make the explanation reproducible (the searched
        hyperparameters, and those left open for the fit to choose, are logged once
        chosen; a depth left open is ``depth`` = ``auto``, its choice ``depth_chosen``)."""
        searched = set(self.search.grid()) if self.search is not None else set()
        hyperparameters = {
            k: v for k, v in self.hyperparameters().items() if k not in searched and v is not None
        }
        if self.fit.depth is None and "depth" not in searched:
            hyperparameters["depth"] = AUTO_DEPTH
        if self.fit.generated_rows:  # logged only when set: runs before it have none
            hyperparameters["generated_rows"] = self.fit.generated_rows
        return {
            "ensemble_uri": self.ensemble_uri,
            "ensemble_model_id": self.ensemble_model_id,
            "ensemble_source": self.ensemble_source,
            "ensemble_files_digest": self.ensemble_files_digest,
            "requested_model_uri": self.model_uri,
            "data": self.data,
            "data_digest": self.data_digest,
            "test_data": self.test_data,
            "test_data_digest": self.test_data_digest,
            "target": self.target,
            "test_size": self.test_size if self.test_size is not None else "",
            "min_test_rows": self.min_test_rows,
            "solver": self.fit.solver,
            "time_limit": self.fit.time_limit,
            "seed": self.seed,
            "registered_name": self.registered_name,
            "class_names": ",".join(self.class_names or ()),
            "explain_digest": self.digest,
            **hyperparameters,
            **(self.search.params() if self.search is not None else {}),
        }

    def record(self) -> dict:
        """The request as plain JSON values (``provenance.request`` of the evidence):
        :meth:`from_record` rebuilds it, with the same :attr:`digest`."""
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        record["fit"] = dict(self.fit)
        record["class_names"] = list(self.class_names) if self.class_names else None
        record["search"] = self.search.identity() if self.search is not None else None
        if self.data_source is None:  # written only when set: other evidence keeps its bytes
            del record["data_source"]
        else:
            record["data_source"] = self.data_source.to_json()
        return record

    @classmethod
    def from_record(cls, record: dict, **changes) -> ExplainRequest:
        """The request :meth:`record` wrote, with ``changes`` (e.g. other file paths).

        A parameter the record lacks (written before it existed) takes its legacy
        value (:meth:`FitParams.recorded`), so the same tree is fitted again.

        Raises
        ------
        ExplainError
            A stored estimator parameter the installed ``MiretSurrogate`` refuses.
        """
        values = {**record, **changes}
        values["fit"] = FitParams.recorded(values["fit"])
        names = values["class_names"]
        values["class_names"] = tuple(names) if names else None
        if values["search"] is not None:
            values["search"] = SearchSettings(**values["search"])
        if isinstance(values.get("data_source"), dict):
            values["data_source"] = TableSample.from_json(values["data_source"])
        return cls(**values)


def check_search(search: SearchSettings) -> None:
    """Refuse search settings ``MiretSearchCV`` would fail on, before any work."""
    options = search.options()
    problems = []
    if options["backend"] not in ("loky", "ray"):
        problems.append(f"backend must be loky or ray, got {options['backend']!r}")
    if not (isinstance(options["cv"], int) and options["cv"] >= 2):
        problems.append(f"cv must be an integer >= 2, got {options['cv']!r}")
    if not 0 <= float(options["tolerance"]) <= 1:
        problems.append(f"tolerance must be in [0, 1], got {options['tolerance']}")
    if not float(options["search_time_limit"]) > 0:
        problems.append(
            f"search time limit must be positive seconds, got {options['search_time_limit']}"
        )
    grid = options["param_grid"]
    if grid is not None and (
        not isinstance(grid, dict) or not grid or not all(list(v) for v in grid.values())
    ):
        problems.append(f"the search grid must map parameter names to values, got {grid!r}")
    if problems:
        raise ExplainError("bad search settings: " + "; ".join(problems))


def check_class_names(class_names, ensemble) -> tuple | None:
    """``class_names`` as a tuple of strings (None stays None).

    Raises
    ------
    ExplainError
        Not one distinct name per class of ``ensemble``.
    """
    if class_names is None:
        return None
    names = tuple(str(name) for name in class_names)
    if len(names) != len(ensemble.classes) or len(set(names)) != len(names):
        raise ExplainError(
            f"class names {list(names)} must be {len(ensemble.classes)} distinct names, one "
            f"per class of the ensemble {np.asarray(ensemble.classes).tolist()} in that order"
        )
    return names
