"""The one table of supported libraries: every family the README lists has exactly one
entry, each entry's MLflow flavor has a safe loader, and a model of no entry is refused
as before."""

import dataclasses
from pathlib import Path

import lightgbm
import numpy as np
import pytest
import xgboost
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression

from miret_governance.governance.ensembles.readers.lightgbm_text import LightGBMText
from miret_governance.governance.ensembles.readers.reading import (
    LIBRARIES,
    library_of,
    read_estimator,
)
from miret_governance.governance.ensembles.trees import UnsupportedModelError

README = Path(__file__).resolve().parents[4] / "README.md"
FAMILIES = {
    "RandomForest": RandomForestClassifier(),
    "ExtraTrees": ExtraTreesClassifier(),
    "GradientBoosting": GradientBoostingClassifier(),
    "HistGradientBoosting": HistGradientBoostingClassifier(),
    "XGBoost": xgboost.XGBClassifier(),
    "LightGBM": lightgbm.LGBMClassifier(),
}
"""Each family the README's "Your own models" lists, as an (unfitted) instance."""


def test_every_family_the_readme_lists_has_one_entry():
    readme = README.read_text(encoding="utf-8")
    for family, model in FAMILIES.items():
        assert family in readme, family
        entries = [library for library in LIBRARIES if library.reads(model)]
        assert len(entries) == 1, (family, [library.name for library in entries])
        assert family in entries[0].name.split(), (family, entries[0].name)
    assert library_of(LightGBMText("")).name == "LightGBM"


def test_every_entry_is_frozen_and_has_a_safe_loader():
    from miret_governance.flavors.store.inputs import FLAVOR_LOADERS

    assert len({library.name for library in LIBRARIES}) == len(LIBRARIES)
    for library in LIBRARIES:
        assert library.flavor in FLAVOR_LOADERS, library.name
        with pytest.raises(dataclasses.FrozenInstanceError):
            library.name = "other"
    assert set(FLAVOR_LOADERS) == {library.flavor for library in LIBRARIES}


def test_a_subclass_is_read_by_its_base_entry():
    class MyForest(RandomForestClassifier):
        pass

    assert library_of(MyForest()).name == library_of(RandomForestClassifier()).name


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (RandomForestRegressor(), "it is not a supported tree ensemble classifier"),
        (LogisticRegression(), "it is not a supported tree ensemble classifier"),
        (object(), "it is not a supported tree ensemble classifier"),
        (lightgbm.LGBMRegressor(), "it is not a LightGBM classifier or Booster"),
        (RandomForestClassifier(), "it is not fitted (call fit first)"),
        (GradientBoostingClassifier(), "it is not fitted (call fit first)"),
        (HistGradientBoostingClassifier(), "it is not fitted (call fit first)"),
        (xgboost.XGBClassifier(), "it is not fitted (call fit first)"),
    ],
)
def test_a_model_no_entry_reads_is_refused_as_before(model, reason):
    with pytest.raises(UnsupportedModelError) as raised:
        read_estimator(model)
    name = f"{type(model).__module__}.{type(model).__qualname__}"
    assert str(raised.value).startswith(f"Unsupported model {name}: {reason}.")


def test_a_fitted_model_is_read_by_its_entry():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(int)
    read = read_estimator(RandomForestClassifier(n_estimators=2, random_state=0).fit(X, y))
    assert len(read["trees"]) == 2
    assert read["feature_names"] == ["x0", "x1", "x2"]
