"""The ``miret`` evaluator on models that encode categories (a one-hot pipeline, a
HistGradientBoosting model with native categorical columns): the evaluation rows are
read in their original columns, and the feature count and the rules speak in them."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder

from miret_governance.flavors.explain.fit_params import FitParams
from miret_governance.flavors.read.evaluator import (
    _write_artifacts,
    evaluation_features,
    fit_and_measure,
)
from miret_governance.governance.ensembles.readers.reading import read_ensemble


def rows(n=120, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "bmi_band": rng.choice(["normal", "obese", "severe"], n),
            "bmi": rng.uniform(18, 45, n).round(1),
        }
    )
    return frame, ((frame.bmi_band != "normal") & (frame.bmi > 25)).astype(int).to_numpy()


def test_encoded_models_are_evaluated_in_their_original_columns(tmp_path):
    frame, label = rows()
    prep = ColumnTransformer([("onehot", OneHotEncoder(), ["bmi_band"])], remainder="passthrough")
    forest = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0)
    native = HistGradientBoostingClassifier(max_iter=10, max_depth=3, random_state=0)
    models = {
        "pipeline": Pipeline([("prep", prep), ("model", forest)]).fit(frame, label),
        "native": native.fit(frame.astype({"bmi_band": "category"}), label),
    }
    params = FitParams(depth=2, time_limit=30.0, work_limit=1.0, stall_work=0.5)
    for name, model in models.items():
        ensemble, raw = evaluation_features(
            SimpleNamespace(features_data=frame), read_ensemble(model)
        )
        assert raw.shape == (120, 4) and ensemble.encoding is not None
        surrogate, metrics = fit_and_measure(ensemble, params, raw)
        assert metrics["miret_fidelity"] > 0.9, name
        used = [ensemble.feature_names[j] for j in surrogate.tree_.used_features()]
        originals = {ensemble.encoding.original(n) for n in used}
        assert metrics["miret_n_encoded_features"] == len(used), name
        assert metrics["miret_n_features"] == len(originals) == 2, name
        files = _write_artifacts(
            surrogate, None, "models:/bmi/1", params, tmp_path, ensemble.encoding
        )
        text = files["miret_rules"].read_text()
        assert "bmi_band in {" in text or "bmi_band not in {" in text, text
        assert "__" not in text and "bmi_band_" not in text, text
