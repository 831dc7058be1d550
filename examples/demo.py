"""End-to-end demo: train and register a forest in MLflow, explain it, run the gates.

Run with ``make demo`` (or ``.venv/bin/python examples/demo.py`` from the repository
root). Everything is stored locally: the tracking and registry store is
``sqlite:///mlflow.db`` in the repository root; figures, ``report.html`` and
``model_card.md`` are copied to ``demo-output/``. The demo makes a local key pair in
``demo-output/keys/`` (a demo key: in production the private key is the CI job's secret),
signs the explanation and the gate decisions with it, and writes the policies the README
uses, ``demo-output/policies/lenient.toml``, ``strict.toml`` and ``drift.toml``: those of
``examples/policies/`` plus a ``[keys.demo]`` table trusting that key. After the champion
is promoted, a retrained forest is registered as version 2, explained, and gated under
``drift.toml`` against the champion, so that its version page shows what changed since the
champion. The demo ends with what happened and where to look (``make ui`` opens the MLflow
UI on the store).

Each step is a small function called from :func:`main`; a step takes and returns a
:class:`DemoState` so that further steps can be appended to ``STEPS``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import mlflow
import mlflow.sklearn
import pandas as pd
from mlflow.models import infer_signature
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.report.figures import save_vite_figures

ROOT = Path(__file__).resolve().parents[1]
TRACKING_URI = f"sqlite:///{ROOT / 'mlflow.db'}"
OUTPUT = ROOT / "demo-output"
KEY = OUTPUT / "keys" / "demo"
"""The demo key pair: ``demo.pem`` (private) and ``demo.pub``, kept across demo runs so
that earlier surrogates in ``mlflow.db`` still verify."""
TRAIN = OUTPUT / "train.csv"
"""The training rows with their label column ``target``: what every explain reads."""
ROWS = OUTPUT / "rows.csv"
"""Three test rows (label column ``target``, ignored) for ``govern explain-row``."""
DEMO_TRUST = (
    "\n[keys.demo]  # the local demo key pair of demo-output/keys/\n"
    'public_key = "../keys/demo.pub"  # relative to the policy file\n'
    'may_sign = ["explain", "decide"]\n'
)
POLICIES = ("lenient", "strict", "drift")
"""The policies of ``examples/policies/`` the demo writes to ``demo-output/policies/``."""
MODEL_NAME = "wisconsin-rf"
EXPERIMENT = "wisconsin-demo"
# skops refuses to load types it does not know; the forest's fitted trees are the only
# ones outside its default trust list.
SKOPS_TRUSTED_TYPES = ["sklearn.tree._tree.Tree"]


@dataclass
class DemoState:
    """What the steps share: data, the fitted model, its registry URI, outputs."""

    X_train: pd.DataFrame | None = None
    X_test: pd.DataFrame | None = None
    y_train: pd.Series | None = None
    y_test: pd.Series | None = None
    model: Pipeline | None = None
    model_uri: str | None = None
    explained: object = None
    candidate_uri: str | None = None
    candidate: object = None
    signing_key: object = None
    promotions: list[str] = field(default_factory=list)
    outputs: dict[str, list[Path]] = field(default_factory=dict)


def configure_mlflow(state: DemoState) -> DemoState:
    """Point tracking and registry at the local SQLite store."""
    mlflow.set_tracking_uri(TRACKING_URI)
    mlflow.set_registry_uri(TRACKING_URI)
    mlflow.set_experiment(EXPERIMENT)
    return state


def make_demo_key(state: DemoState) -> DemoState:
    """A local demo key pair (made once) and the demo policies that trust it."""
    from miret_governance.governance.trust.signers import SigningKey, generate_key_pair

    private = KEY.with_suffix(".pem")
    if private.exists():
        print(f"using the local demo key pair {private.relative_to(ROOT)} (private) and .pub")
    else:
        private, public = generate_key_pair(KEY)
        print(
            f"made a local DEMO key pair: {private.relative_to(ROOT)} (private) and "
            f"{public.relative_to(ROOT)}; it signs this demo's evidence and decisions. In "
            "production make one with `govern keygen` and give the private key to the CI job only"
        )
    state.signing_key = SigningKey.load(private)
    (OUTPUT / "policies").mkdir(parents=True, exist_ok=True)
    for name in POLICIES:
        text = (ROOT / "examples" / "policies" / f"{name}.toml").read_text()
        (OUTPUT / "policies" / f"{name}.toml").write_text(text + DEMO_TRUST)
    print(
        "wrote demo-output/policies/"
        + ", ".join(f"{name}.toml" for name in POLICIES)
        + " (trusting the demo key)"
    )
    return state


def load_data(state: DemoState) -> DemoState:
    """Wisconsin diagnostic breast-cancer data, stratified 75/25 split."""
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    state.X_train, state.X_test, state.y_train, state.y_test = train_test_split(
        X, y, test_size=0.25, stratify=y, random_state=0
    )
    return state


def _register_forest(state: DemoState, run_name: str, **forest_params) -> tuple[Pipeline, str]:
    """Fit MinMaxScaler + a depth-3 random forest, log it with skops and register it."""
    params = {"max_depth": 3, "n_estimators": 100, "max_features": None} | forest_params
    model = Pipeline([("scale", MinMaxScaler()), ("forest", RandomForestClassifier(**params))])
    model.fit(state.X_train, state.y_train)
    with mlflow.start_run(run_name=run_name):
        mlflow.log_params({k: str(v) for k, v in params.items()})
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(state.X_train, model.predict(state.X_train)),
            input_example=state.X_train.head(5),
            registered_model_name=MODEL_NAME,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_SKOPS,
            skops_trusted_types=SKOPS_TRUSTED_TYPES,
        )
        mlflow.log_metrics(
            {
                "train_accuracy": model.score(state.X_train, state.y_train),
                "test_accuracy": model.score(state.X_test, state.y_test),
            },
            model_id=info.model_id,
        )
    uri = f"models:/{MODEL_NAME}/{info.registered_model_version}"
    print(f"registered {uri} (run {info.run_id})")
    return model, uri


def train_and_register(state: DemoState) -> DemoState:
    """Fit MinMaxScaler + random forest (depth 3, as in the paper) and register it."""
    state.model, state.model_uri = _register_forest(state, "train-wisconsin-rf", random_state=0)
    return state


def explain_vite(state: DemoState) -> DemoState:
    """VITE heatmaps of the registered forest (level and node frequency)."""
    ensemble = read_ensemble(state.model)
    state.outputs["VITE figures"] = save_vite_figures(ensemble, OUTPUT / "vite")
    return state


def _explain(state: DemoState, model_uri: str):
    """``govern explain`` of ``model_uri`` on ``demo-output/train.csv`` with default
    settings and the same live progress (stage, elapsed, incumbent, bound)."""
    from miret_governance.cli.explain import live_progress
    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.explain.fit_params import estimator_defaults

    print(
        f"govern explain --model-uri {model_uri} --data {TRAIN.relative_to(ROOT)} --target target"
    )
    with live_progress(estimator_defaults()["time_limit"]) as progress:
        result = explain_model_version(
            model_uri,
            TRAIN,
            target="target",
            class_names=["malignant", "benign"],
            progress=progress,
            signing_key=state.signing_key,
        )
    verb = "reused" if result.reused else f"registered in {result.seconds:.1f} s"
    print(
        f"{verb}: {result.surrogate_uri} (fidelity train {result.metrics['train_fidelity']:.3f}, "
        f"test {result.metrics.get('test_fidelity', float('nan')):.3f})"
    )
    print("rules (raw units):")
    print(result.rules)
    return result


def explain_surrogate(state: DemoState) -> DemoState:
    """Explain the registered forest: a linked surrogate version. Writes the training
    rows (``demo-output/train.csv``) and three test rows for ``govern explain-row``
    (``demo-output/rows.csv``)."""
    OUTPUT.mkdir(exist_ok=True)
    state.X_train.assign(target=state.y_train).to_csv(TRAIN, index=False)
    state.X_test.head(3).assign(target=state.y_test.head(3)).to_csv(ROWS, index=False)
    state.explained = _explain(state, state.model_uri)
    state.outputs["reviewer's report and model card"] = copy_report(
        state.explained.surrogate_uri, OUTPUT
    )
    return state


def copy_report(surrogate_uri: str, folder: Path) -> list[Path]:
    """Copy the surrogate's report.html and model_card.md into ``folder``."""
    with tempfile.TemporaryDirectory(prefix="demo-") as tmp:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=surrogate_uri, dst_path=tmp))
        folder.mkdir(parents=True, exist_ok=True)
        copies = [folder / name for name in ("report.html", "model_card.md")]
        for path in copies:
            shutil.copyfile(local / path.name, path)
    return copies


def _promote(state: DemoState, alias: str, policy: str) -> None:
    from miret_governance.cli.gates import print_gates
    from miret_governance.flavors.trail.promotion import promote_model_version
    from miret_governance.governance.trust.policy import load_policy

    print(f"govern promote --model-uri {state.model_uri} --alias {alias} --policy {policy}")
    outcome = promote_model_version(
        state.model_uri, alias, load_policy(ROOT / policy), signing_key=state.signing_key
    )
    print_gates(outcome.gate)
    tags = mlflow.MlflowClient().get_model_version(*state.model_uri[8:].split("/")).tags
    verdict = "promoted" if outcome.promoted else "refused"
    where = f"@{alias} -> version {outcome.alias_version}"
    if outcome.alias_version is None:
        where = f"@{alias} is not set"
    state.promotions.append(f"{Path(policy).name}: {verdict} ({where})")
    print(f"{verdict}: {where}; recorded on {state.model_uri} as")
    for key in sorted(tags):
        if key.startswith(("governance.last_gate", f"governance.promotion.{alias}")):
            print(f"  {key} = {tags[key]}")
    print(f"  and in run {outcome.gate.run_id} of experiment governance-gates")


def promote_lenient(state: DemoState) -> DemoState:
    """Gates of the lenient policy pass: the version becomes @champion."""
    _promote(state, "champion", "demo-output/policies/lenient.toml")
    return state


def promote_strict(state: DemoState) -> DemoState:
    """Gates of the strict policy fail: @production is refused."""
    _promote(state, "production", "demo-output/policies/strict.toml")
    return state


def retrain_and_register(state: DemoState) -> DemoState:
    """A retrained forest (another seed, 5 random features of 30 at each split)
    registered as the next version: the candidate to compare with the champion."""
    _, state.candidate_uri = _register_forest(
        state, "retrain-wisconsin-rf", max_features="sqrt", random_state=1
    )
    return state


def explain_candidate(state: DemoState) -> DemoState:
    """Explain the candidate as the champion was explained."""
    state.candidate = _explain(state, state.candidate_uri)
    state.outputs["the candidate's report and model card"] = copy_report(
        state.candidate.surrogate_uri, OUTPUT / "candidate"
    )
    return state


def gate_candidate(state: DemoState) -> DemoState:
    """Gates of the drift policy on the candidate, against the champion, with the
    training rows for cross-fidelity: the figures land on the candidate's page."""
    from miret_governance.cli.gates import print_gates
    from miret_governance.flavors.gates.gating import gate_model_version
    from miret_governance.governance.trust.policy import load_policy

    policy = "demo-output/policies/drift.toml"
    print(
        f"govern gate --model-uri {state.candidate_uri} --policy {policy} "
        f"--data {TRAIN.relative_to(ROOT)} --target target"
    )
    outcome = gate_model_version(
        state.candidate_uri,
        load_policy(ROOT / policy),
        data=TRAIN,
        target="target",
        signing_key=state.signing_key,
    )
    print_gates(outcome)
    verdict = "passed" if outcome.evaluation.all_passed else "failed"
    drift, cross = outcome.drift or {}, (outcome.drift or {}).get("cross_fidelity")
    state.promotions.append(
        f"drift.toml on the retrained {state.candidate_uri} (explained as "
        f"{state.candidate.surrogate_uri}): {verdict}; since the champion: change in the "
        f"ensembles' feature use (VITE) {drift.get('explanation_drift', float('nan')):.3f}, "
        f"feature overlap "
        f"{drift.get('feature_overlap', float('nan')):.3f}, cross-fidelity "
        + ("not measured" if cross is None else f"{cross['value']:.3f}")
    )
    return state


def report(state: DemoState) -> DemoState:
    """Say what happened and where to look, with commands that work as printed (from
    the repository root)."""
    result = state.explained
    name = result.registered_name
    metrics = result.metrics
    print("\nWhat happened")
    print(f"  1. trained and registered {state.model_uri} (MinMaxScaler + random forest)")
    print(
        f"     (a local demo key in {KEY.parent.relative_to(ROOT)}/ signs evidence and decisions)"
    )
    print(
        f"  2. explained it: surrogate {result.surrogate_uri}, test fidelity "
        f"{metrics.get('test_fidelity', float('nan')):.3f} with "
        f"{metrics['n_features_used']:.0f} features (CART baseline "
        f"{metrics.get('baseline_cart_test_fidelity', float('nan')):.3f})"
    )
    for number, line in enumerate(state.promotions, start=3):
        print(f"  {number}. gates, {line}")
    print(f"\nWhere to look (from {ROOT})")
    for title, paths in state.outputs.items():
        print(f"  {title}: " + "  ".join(str(p.relative_to(ROOT)) for p in paths))
    print(
        "  MLflow UI:  make ui   (or: .venv/bin/mlflow ui --backend-store-uri sqlite:///mlflow.db)"
    )
    print("              then open http://127.0.0.1:5000")
    print(
        f"  report in the UI:  Models -> {name} -> Version {result.version} -> logged model "
        "-> Artifacts -> report.html"
    )
    policy = "--policy demo-output/policies/lenient.toml"
    print(f"  in the terminal:   .venv/bin/govern show --model-uri {state.model_uri} {policy}")
    print(
        f"  one applicant's path:  .venv/bin/govern explain-row --model-uri "
        f"models:/{MODEL_NAME}@champion --data {ROWS.relative_to(ROOT)} {policy}"
    )
    if state.candidate_uri:
        print(
            f"  what changed since the champion, in the UI:  Models -> {MODEL_NAME} -> "
            f'Version {state.candidate_uri.rsplit("/", 1)[1]} -> "Since the champion"'
        )
        print(
            f"    in the terminal:  .venv/bin/govern diff --from models:/{MODEL_NAME}@champion "
            f"--to {state.candidate_uri} --data {TRAIN.relative_to(ROOT)} {policy}"
        )
    return state


STEPS = [
    configure_mlflow,
    make_demo_key,
    load_data,
    train_and_register,
    explain_vite,
    explain_surrogate,
    promote_lenient,
    promote_strict,
    retrain_and_register,
    explain_candidate,
    gate_candidate,
    report,
]


def main(argv=None) -> None:
    """Run every step from the repository root, so that ``mlflow.db`` and the artifacts
    it points to (``./mlruns``) land together wherever the demo was started from."""
    argparse.ArgumentParser(
        prog="examples/demo.py", description=__doc__.split("\n\n")[0].replace("\n", " ")
    ).parse_args(argv)
    os.chdir(ROOT)
    state = DemoState()
    for step in STEPS:
        start = time.perf_counter()
        state = step(state)
        print(f"[{step.__name__}: {time.perf_counter() - start:.1f} s]")


if __name__ == "__main__":
    main()
