"""``govern explain``: a thin command over :func:`flavors.explain.explain_model_version`,
with a live display of its stages."""

from __future__ import annotations

import json
import math
import signal
import sys
import warnings
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import quote

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from miret_governance.cli.common import (
    AUTO_DEPTH,
    CANDIDATE_CAP,
    DEFAULTS,
    ENSEMBLE_DEPTH,
    MIN_TEST_ROWS,
    SEARCH_DEFAULTS,
    CertificateChainOption,
    Depth,
    Engine,
    MinTestRows,
    ModelUri,
    PolicyFile,
    Seed,
    SigningCertificateOption,
    SigningKeyOption,
    Solver,
    SparkDataFile,
    SupersedeOption,
    Target,
    TestDataFile,
    TimeLimit,
    TrackingUri,
    TrustPickle,
    connect,
    console,
    data_of,
    errors,
    exit_codes,
    import_model_readers,
    load_signing_key,
    without_passwords,
)
from miret_governance.cli.tables import metrics_table
from miret_governance.flavors.explain.defaults import SAMPLE_ROWS
from miret_governance.governance.errors import InvalidInputError

SEARCH_PANEL = "Hyperparameter search"


def _ui_hints(result) -> list[str]:
    import mlflow

    uri = result.tracking_uri
    if uri.startswith(("http://", "https://")):
        base, lines = uri.rstrip("/"), []
    else:
        base = "http://127.0.0.1:5000"
        shown = without_passwords(uri)
        lines = [f"Open the MLflow UI:  {sys.executable} -m mlflow ui --backend-store-uri {shown}"]
    ensemble_name, ensemble_version = result.ensemble_uri[len("models:/") :].rsplit("/", 1)
    run = mlflow.get_run(result.run_id) if result.run_id else None
    lines += [
        (
            f"Surrogate version:  {base}/#/models/{quote(result.registered_name)}/versions/"
            f"{result.version}"
        ),
        f"Ensemble version:   {base}/#/models/{quote(ensemble_name)}/versions/{ensemble_version}",
    ]
    if run is not None:
        lines.append(
            f"Explain run:        {base}/#/experiments/{run.info.experiment_id}/runs/"
            f"{result.run_id}"
        )
    return lines


class _StageProgress:
    """Rich progress: one line per stage, and the solver's elapsed time, incumbent, gap."""

    def __init__(self, progress: Progress, time_limit: float):
        self.progress = progress
        self.time_limit = time_limit
        self.tasks = {}
        self.current = None

    def __call__(self, stage: str, detail: dict) -> None:
        if stage != self.current:
            if self.current is not None:
                task = self.tasks[self.current]
                self.progress.update(task, completed=self.progress.tasks[task].total)
            total = self.time_limit if stage == "solve" else 1
            label = {"solve": "solve (MILP)", "search": _search_label(detail)}.get(stage, stage)
            self.tasks[stage] = self.progress.add_task(label, total=total)
            self.current = stage
        if stage == "solve" and detail:
            gap = detail.get("gap")
            incumbent = detail.get("incumbent")
            parts = ["solve (MILP)"]
            if incumbent is not None and math.isfinite(incumbent):
                parts.append(f"incumbent {incumbent:.4g}")
            bound = detail.get("bound")
            if gap is not None and bound is not None and abs(bound) < 1e30 and math.isfinite(gap):
                parts.append(f"bound {bound:.4g}  gap {100 * gap:.1f}%")
            self.progress.update(
                self.tasks[stage],
                description="  ".join(parts),
                completed=min(float(detail.get("elapsed", 0.0)), self.time_limit),
            )

    def finish(self) -> None:
        if self.current is not None:
            task = self.tasks[self.current]
            self.progress.update(task, completed=self.progress.tasks[task].total)


def _grid(text: str) -> dict | None:
    """The ``--search-grid`` JSON (None when empty)."""
    if not text.strip():
        return None
    try:
        grid = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"--search-grid is not JSON ({exc.msg}): {text!r}") from None
    if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
        raise InvalidInputError(
            f'--search-grid must map parameter names to lists, e.g. {{"alpha": [0.2, 0.5]}}: '
            f"{text!r}"
        )
    return grid


def _search_label(detail: dict) -> str:
    if "candidates" not in detail:
        return "search"
    return f"search: {detail['candidates']} candidates x {detail['folds']} folds"


@contextmanager
def live_progress(time_limit: float):
    """A live display on stderr of the explain stages and, during the solve, the elapsed
    time, incumbent and gap; yields the ``progress(stage, detail)`` callback."""
    columns = (
        SpinnerColumn(finished_text="[green]✓"),
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=errors, transient=False) as progress:
        tracker = _StageProgress(progress, time_limit)
        yield tracker
        tracker.finish()


def search_option(*flags: str, help: str, **options):
    """A ``typer.Option`` of the hyperparameter-search help panel."""
    return typer.Option(*flags, help=help, rich_help_panel=SEARCH_PANEL, **options)


def explain(
    model_uri: ModelUri,
    data: SparkDataFile,
    target: Target = None,
    test_data: TestDataFile = None,
    min_test_rows: MinTestRows = MIN_TEST_ROWS,
    depth: Depth = str(ENSEMBLE_DEPTH),
    alpha: Annotated[
        float | None,
        typer.Option(
            "--alpha",
            help="Weight of the sparsity penalty in the objective (default: chosen among "
            "0.2 and 0.5 on held-out folds of the fit sample).",
        ),
    ] = DEFAULTS["alpha"],
    gamma_percentile: Annotated[
        float,
        typer.Option(
            "--gamma-percentile",
            help="Percentile h: a level may split on the features whose VITE level frequency "
            "exceeds the h-th percentile (0: every feature the ensemble uses there).",
            show_default="100/3",
        ),
    ] = DEFAULTS["gamma_percentile"],
    proximity_threshold: Annotated[
        float | None,
        typer.Option(
            "--proximity-threshold",
            help="Ensemble proximity m from which two samples must share a leaf (above 1: "
            "none; default: chosen between 0.9 and 1 on held-out folds of the fit sample).",
        ),
    ] = DEFAULTS["proximity_threshold"],
    max_rows: Annotated[
        int,
        typer.Option(
            "--max-rows",
            help="Largest stratified sample of training rows the MILP works on; fidelity "
            "and the other metrics are still computed on every row.",
        ),
    ] = DEFAULTS["max_rows"],
    generated_rows: Annotated[
        float,
        typer.Option(
            "--generated-rows",
            min=0.0,
            help="Rows generated next to the ensemble's split thresholds and labelled by the "
            "ensemble, added to the fit sample, as a multiple of its rows (within "
            "--max-rows); every recorded fidelity stays on real rows. 0: none.",
        ),
    ] = DEFAULTS["generated_rows"],
    class_names: Annotated[
        str,
        typer.Option(
            "--class-names",
            help="Names of the classes, one per class, comma-separated in the ensemble's class order "
            "(e.g. malignant,benign), for the reviewer's tree and rules.",
        ),
    ] = "",
    solver: Solver = DEFAULTS["solver"],
    time_limit: TimeLimit = DEFAULTS["time_limit"],
    seed: Seed = DEFAULTS["random_state"],
    registered_name: Annotated[
        str,
        typer.Option(
            "--registered-name",
            help="Registered model of the surrogate (default <name>-surrogate).",
        ),
    ] = "",
    tracking_uri: TrackingUri = None,
    trust_pickle: TrustPickle = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force/--no-force", help="Solve again even if an identical explanation exists."
        ),
    ] = False,
    supersede: SupersedeOption = False,
    policy: PolicyFile = None,
    allow_invalid: Annotated[
        bool,
        typer.Option(
            "--allow-invalid/--no-allow-invalid",
            help="Explain even if input validation fails (the surrogate is tagged as failed).",
        ),
    ] = False,
    search: Annotated[
        bool,
        search_option(
            "--search/--no-search",
            help="Choose alpha, h and m by k-fold cross-validation over the paper's grid "
            "(fewest features within --tolerance of the best validation fidelity), each "
            "candidate logged as a child run.",
        ),
    ] = False,
    search_grid: Annotated[
        str,
        search_option(
            "--search-grid",
            help='Grid as JSON, e.g. \'{"alpha": [0.2, 0.5], "proximity_threshold": [0.9, 1]}\' '
            "(default: the paper's 60 candidates).",
        ),
    ] = "",
    search_time_limit: Annotated[
        float,
        search_option(
            "--search-time-limit",
            help=(
                "Budget of each candidate fit during the search, in units of solver work "
                f"(about seconds); its safety cap is {CANDIDATE_CAP:g} times this in seconds."
            ),
        ),
    ] = SEARCH_DEFAULTS["search_time_limit"],
    cv: Annotated[
        int,
        search_option("--cv", help="Folds of the search."),
    ] = SEARCH_DEFAULTS["cv"],
    tolerance: Annotated[
        float,
        search_option("--tolerance", help="Validation fidelity tolerance of the selection rule."),
    ] = SEARCH_DEFAULTS["tolerance"],
    n_jobs: Annotated[
        int,
        search_option(
            "--n-jobs", help="Parallel candidate fits (0: one; -1: every core or Ray CPU)."
        ),
    ] = 0,
    backend: Annotated[
        str,
        search_option(
            "--backend", help="loky (this machine) or ray (a Ray cluster; needs the ray extra)."
        ),
    ] = SEARCH_DEFAULTS["backend"],
    ray_address: Annotated[
        str,
        search_option(
            "--ray-address",
            envvar="RAY_ADDRESS",
            help="Ray cluster address (default RAY_ADDRESS, else a local Ray).",
        ),
    ] = "",
    engine: Engine = "pandas",
    sample_rows: Annotated[
        int,
        typer.Option(
            "--sample-rows",
            help="With Spark data: about how many rows the explanation is fitted and tested "
            "on, those whose row hash is smallest (the same rows whatever the partitions; "
            "all rows of a smaller table); the fidelity is then counted on every other row "
            "in Spark (table_fidelity).",
        ),
    ] = SAMPLE_ROWS,
    signing_key: SigningKeyOption = None,
    signing_certificate: SigningCertificateOption = None,
    certificate_chain: CertificateChainOption = None,
) -> None:
    """Explain a registered tree ensemble with VITE heatmaps and a MIRET surrogate tree.

    The surrogate, its rules, metrics, figures, report and model card are logged in one
    MLflow run, signed with --signing-key (GOVERN_SIGNING_KEY) and registered as a
    version of <name>-surrogate linked to the ensemble (exit code 1: the input validation
    failed, unless --allow-invalid). Without a key the evidence is unsigned and no gate
    passes it. An earlier version is reused only when this key signed its evidence for
    the same request.

    Spark data (--data spark:<table>, or a Parquet path with --engine spark) is explained
    on a sample of about --sample-rows rows chosen by their content (the same rows
    whatever the partitions), collected in hash order; the fidelity on every other row
    is counted in Spark and recorded (table_fidelity), with the table's row-set digest.
    """
    try:
        with exit_codes():
            import_model_readers()
            from miret_governance.flavors.explain.explain import explain_model_version
            from miret_governance.flavors.explain.faults import signals_raise
            from miret_governance.flavors.explain.request import SearchSettings
            from miret_governance.flavors.explain.reuse import UNSIGNED_WARNING
            from miret_governance.flavors.trust import UnsignedEvidenceWarning

            key = load_signing_key(signing_key, signing_certificate, certificate_chain)
            if key is None:
                errors.print(f"warning: {UNSIGNED_WARNING}", markup=False, soft_wrap=True)
            warnings.simplefilter("ignore", UnsignedEvidenceWarning)
            settings = None
            if search:
                settings = SearchSettings(
                    param_grid=_grid(search_grid),
                    cv=cv,
                    tolerance=tolerance,
                    search_time_limit=search_time_limit,
                    n_jobs=n_jobs or None,
                    backend=backend,
                    ray_address=ray_address or None,
                )
            # explain_model_version checks the parameters, then probes the server
            connect(tracking_uri, fail_fast=False, probe=False)
            with signals_raise(), live_progress(time_limit) as tracker:
                result = explain_model_version(
                    model_uri,
                    data_of(data, engine),
                    target=target or None,
                    test_data=str(test_data) if test_data else None,
                    min_test_rows=min_test_rows,
                    depth=AUTO_DEPTH if depth is None else depth,  # None: the default
                    alpha=alpha,
                    gamma_percentile=gamma_percentile,
                    proximity_threshold=proximity_threshold,
                    max_rows=max_rows,
                    generated_rows=generated_rows,
                    class_names=[n.strip() for n in class_names.split(",")]
                    if class_names
                    else None,
                    solver=solver,
                    time_limit=time_limit,
                    seed=seed,
                    registered_name=registered_name or None,
                    force=force,
                    supersede=supersede,
                    policy=policy,
                    allow_invalid=allow_invalid,
                    trust_pickle=trust_pickle,
                    search=settings,
                    progress=tracker,
                    signing_key=key,
                    sample_rows=sample_rows,
                )
    except KeyboardInterrupt as exc:
        from miret_governance.flavors.explain.faults import reraise_signal

        errors.print(
            "error: interrupted; the explain run was ended as KILLED and nothing was registered",
            markup=False,
        )
        reraise_signal(getattr(exc, "signum", signal.SIGINT))
        raise
    _print_result(result)


def _print_result(result) -> None:
    """The outcome for people: registered or reused, what a reviewer decides on (test
    fidelity with its interval against the plain tree, features, validation, signature),
    the rules, then the technical details (solver, search, every metric) and UI links."""
    from miret_governance.cli.tables import headline_lines
    from miret_governance.flavors.explain.context import chosen_text
    from miret_governance.governance.report.wording import describe_stop, table_fidelity_text

    plain = {"highlight": False, "markup": False, "soft_wrap": True}
    for note in result.recovery_notes:
        console.print(note, **plain)
    if result.reused:
        console.print(
            f"Reused [bold]{escape(result.surrogate_uri)}[/]: the same ensemble version, data and "
            "parameters were already explained (pass --force to solve again)."
        )
    else:
        console.print(
            f"Registered [bold]{escape(result.surrogate_uri)}[/] as the surrogate of "
            f"[bold]{escape(result.ensemble_uri)}[/] in {result.seconds:.1f} s."
        )
    if result.superseded is not None:
        console.print(result.superseded.sentence(result.ensemble_uri), **plain)
    if result.validation == "failed":
        console.print("[bold red]Input validation FAILED[/] (explained with --allow-invalid).")
    for line in headline_lines(result.metrics, result.validation):
        console.print(line, **plain)
    if table_fidelity_text(result.metrics):
        console.print(
            f"fidelity on the table's other rows: {table_fidelity_text(result.metrics)}",
            **plain,
        )
    if result.signed_by:
        console.print(f"evidence signed by key {result.signed_by[:16]}...", **plain)
    else:
        console.print("unsigned: no gate counts this explanation", **plain)
    console.print("\n[bold]Rules[/] (raw input units)")
    console.print(result.rules, **plain)
    console.print("\n[bold]Technical details[/]")
    if result.solve:
        console.print(f"how the tree was found: {describe_stop(result.solve)}", **plain)
    chosen = chosen_text(result.parameters)
    if chosen:
        console.print(f"hyperparameters chosen by the search: {chosen}", **plain)
    console.print(metrics_table(result.metrics))
    for line in _ui_hints(result):
        console.print(line, **plain)


def register(app: typer.Typer) -> None:
    """Add ``explain`` to the ``govern`` app."""
    app.command("explain")(explain)
