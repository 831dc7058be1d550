"""Great Expectations validation of inputs against an ensemble's feature schema."""

import json
import sys

import numpy as np
import pandas as pd
import pytest
from mlflow_store import register_sklearn
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.data.validation import missing_shares, validate_inputs
from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.trust.keyring import SignatureError

pytest_plugins = ["mlflow_store"]

FEATURES = ["age", "income", "debt", "score"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    raw = pd.DataFrame(rng.uniform(0, 100, size=(60, 4)), columns=FEATURES)
    y = pd.Series((raw["income"] > raw["debt"]).astype(int), name="label")
    return raw, y


@pytest.fixture(scope="module")
def raw_ensemble(data):
    """Pipeline(MinMaxScaler, RandomForest) on raw units."""
    raw, y = data
    forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
    return read_ensemble(make_pipeline(MinMaxScaler(), forest).fit(raw, y))


@pytest.fixture(scope="module")
def normalized(data):
    """A forest fitted directly on normalized data, and that data."""
    raw, y = data
    X = (raw - raw.min()) / (raw.max() - raw.min())
    forest = RandomForestClassifier(n_estimators=3, max_depth=2, random_state=0)
    return read_ensemble(forest.fit(X, y)), X


def only(report):
    assert not report.success
    assert len(report.failures) == 1, report.summary()
    return report.failures[0]


def test_clean_raw_data_passes_and_is_normalized(data, raw_ensemble):
    raw, y = data
    report = validate_inputs(raw.assign(label=y), raw_ensemble, label="label")
    assert report.success, report.summary()
    # 17: row count, column set, 5 x (type, not null, range), label: not null, classes (2)
    assert report.summary().startswith("Input validation passed: 17 of 17 expectations met on 60")
    assert report.normalized.min() == 0.0 and report.normalized.max() == 1.0
    np.testing.assert_allclose(report.normalized, raw_ensemble.transform(raw))
    results = report.to_json()
    assert results["success"] and results["statistics"]["evaluated_expectations"] == 17
    types = {r["expectation_config"]["type"] for r in results["results"]}
    assert types == {
        "expect_table_row_count_to_be_between",
        "expect_table_columns_to_match_set",
        "expect_column_values_to_be_in_type_list",
        "expect_column_values_to_not_be_null",
        "expect_column_unique_value_count_to_be_between",
        "expect_column_distinct_values_to_be_in_set",
        "expect_column_values_to_be_between",
    }
    json.dumps(results)


def test_clean_normalized_data_passes(normalized):
    ensemble, X = normalized
    assert ensemble.preprocessor is None
    report = validate_inputs(X, ensemble)
    assert report.success, report.summary()
    np.testing.assert_array_equal(report.normalized, X.to_numpy())


def test_reordered_columns_pass_and_are_reordered(data, raw_ensemble):
    raw, y = data
    shuffled = raw[["score", "debt", "age", "income"]].assign(label=y)
    report = validate_inputs(shuffled, raw_ensemble, label="label")
    assert report.success, report.summary()
    assert list(report.frame.columns) == FEATURES + ["label"]
    pd.testing.assert_frame_equal(report.frame[FEATURES], raw)


def test_nan_is_reported_with_rows(normalized):
    ensemble, X = normalized
    bad = X.copy()
    bad.loc[[3, 7], "debt"] = np.nan
    failure = only(validate_inputs(bad, ensemble))
    assert failure.expectation == "expect_column_values_to_not_be_null"
    assert failure.message == (
        "column 'debt': 2 rows (3.33%) with missing values (null/NaN); rows 3, 7"
    )


def test_missing_values_are_checked_against_the_training_share(normalized):
    ensemble, X = normalized
    training = X.copy()
    training.loc[[0, 1, 2, 3, 4, 5], "income"] = np.nan  # 6 of 60: 10%
    reference = missing_shares(training, FEATURES)
    assert reference == {"age": 0.0, "income": 0.1, "debt": 0.0, "score": 0.0}
    assert validate_inputs(training, ensemble, training_missing=reference).success
    within = X.copy()
    within.loc[range(9), "income"] = np.nan  # 15%: the training 10% plus 5 points
    assert validate_inputs(within, ensemble, training_missing=reference).success
    above = X.copy()
    above.loc[range(10), "income"] = np.nan  # 16.7%
    above.loc[[20], "age"] = np.nan  # age was complete in training
    report = validate_inputs(above, ensemble, training_missing=reference)
    assert not report.success
    assert [f.message for f in report.failures] == [
        (
            "column 'age': 1 row (1.67%) with missing values (null/NaN), but the training "
            "data had none in this column; rows 20"
        ),
        (
            "column 'income': 10 rows (16.7%) with missing values (null/NaN), more than the "
            "training data's 10% plus the tolerance of 5 points (at most 15%); rows 0, 1, "
            "2, 3, 4, ..."
        ),
    ]
    null_checks = [
        r
        for r in report.to_json()["results"]
        if r["expectation_config"]["type"] == "expect_column_values_to_not_be_null"
    ]
    assert [r["expectation_config"]["kwargs"].get("mostly", 1.0) for r in null_checks] == [
        1.0,
        pytest.approx(0.85),
        1.0,
        1.0,
    ]
    assert null_checks[1]["expectation_config"]["meta"] == {
        "training_missing_share": 0.1,
        "missing_tolerance": 0.05,
    }
    strict = validate_inputs(above, ensemble, training_missing=reference, missing_tolerance=0)
    assert "at most 10%" in strict.failures[1].message
    with pytest.raises(ValueError, match=r"missing_tolerance must be in \[0, 1\]"):
        validate_inputs(X, ensemble, training_missing=reference, missing_tolerance=2)


def test_explain_validates_the_test_file_against_the_training_file(normalized):
    from miret_governance.flavors.explain.validation_worker import validate_frames

    ensemble, X = normalized
    training, test = X.iloc[:40].copy(), X.iloc[40:].reset_index(drop=True)
    training.loc[[0, 1, 2, 3], "score"] = np.nan  # 10% of the training rows
    test.loc[[0, 1, 2, 3], "score"] = np.nan  # 20% of the test rows: above 15%
    outcomes = validate_frames(
        {"validation.json": training, "validation_test.json": test}, ensemble, None
    )
    assert outcomes["validation.json"]["success"] and outcomes["validation.json"]["sound"]
    assert not outcomes["validation_test.json"]["success"]
    assert outcomes["validation_test.json"]["sound"]  # NaN alone: --allow-invalid can explain
    assert (
        "column 'score': 4 rows (20%) with missing values (null/NaN), more than the "
        in (outcomes["validation_test.json"]["summary"])
    )


def test_infinity_is_reported_as_infinite(data, raw_ensemble):
    raw, _ = data
    bad = raw.copy()
    bad.loc[5, "income"] = np.inf
    failure = only(validate_inputs(bad, raw_ensemble))
    assert failure.expectation == "expect_column_values_to_be_between"
    assert failure.column == "income"
    assert "1 row (1.67%) outside [0, 1] after the ensemble's normalization (1 infinite" in (
        failure.message
    )
    assert failure.message.endswith("e.g. inf; rows 5")


def test_value_beyond_the_recorded_training_range_without_a_scaler(normalized):
    ensemble, X = normalized
    bad = X.copy()
    bad.loc[2, "score"] = 1.2
    # Nothing recorded: only finiteness is required (the ensemble has no scaler).
    assert validate_inputs(bad, ensemble).success
    recorded = MinMaxScaler().fit(X)
    failure = only(validate_inputs(bad, ensemble, training_range=recorded))
    assert failure.column == "score"
    assert failure.message == (
        "column 'score': 1 row (1.67%) outside the training range [0, 1] (e.g. 1.2); rows 2"
    )


def test_xgboost_on_raw_features_validates_against_its_training_range(data):
    import xgboost

    raw, y = data
    model = xgboost.XGBClassifier(n_estimators=5, max_depth=2).fit(raw, y)
    ensemble = read_ensemble(model)
    recorded = MinMaxScaler().fit(raw)
    assert validate_inputs(raw, ensemble, training_range=recorded).success
    report = validate_inputs(raw[FEATURES[::-1]], ensemble, training_range=recorded)
    assert report.success and report.to_json()["meta"]["training_range"]["age"] == [
        raw["age"].min(),
        raw["age"].max(),
    ]
    bad = raw.copy()
    bad.loc[3, "debt"] = -1.0
    failure = only(validate_inputs(bad, ensemble, training_range=recorded))
    assert failure.column == "debt" and "outside the training range [" in failure.message
    bad.loc[3, "debt"] = np.inf
    assert "infinite" in only(validate_inputs(bad, ensemble)).message
    with pytest.raises(ValueError, match="no entry for features"):
        validate_inputs(raw, ensemble, training_range=MinMaxScaler().fit(raw[FEATURES[:2]]))


def test_duplicate_columns_and_label_types(data, raw_ensemble):
    raw, y = data
    duplicated = pd.concat([raw, raw[["age"]]], axis=1)
    with pytest.raises(ValueError, match=r"duplicate column names \['age'\]"):
        validate_inputs(duplicated, raw_ensemble)
    floats = validate_inputs(raw.assign(label=y.astype(float)), raw_ensemble, label="label")
    assert floats.success, floats.summary()
    mixed = raw.assign(label=y.astype(object))
    mixed.loc[0, "label"] = "1"
    report = validate_inputs(mixed, raw_ensemble, label="label")
    assert not report.success
    assert any("mixes numbers and text" in f.message for f in report.failures), report.summary()


def test_raw_value_beyond_training_max(data, raw_ensemble):
    raw, _ = data
    bad = raw.copy()
    top = raw["age"].max()
    bad.loc[0, "age"] = top + (top - raw["age"].min())  # maps to exactly 2.0
    failure = only(validate_inputs(bad, raw_ensemble))
    assert failure.column == "age"
    assert f"e.g. 2 (raw {bad.loc[0, 'age']:.6g}); rows 0" in failure.message


def test_mostly_tolerates_a_fraction_of_rows(data, raw_ensemble):
    raw, _ = data
    bad = raw.copy()
    bad.loc[0, "age"] = 1e6
    assert not validate_inputs(bad, raw_ensemble).success
    tolerant = validate_inputs(bad, raw_ensemble, mostly=0.95)
    assert tolerant.success and tolerant.mostly == 0.95
    with pytest.raises(ValueError, match=r"mostly must be in \(0, 1\]"):
        validate_inputs(raw, raw_ensemble, mostly=0)


def test_missing_column(data, raw_ensemble):
    raw, _ = data
    report = validate_inputs(raw.drop(columns=["debt"]), raw_ensemble)
    failure = only(report)
    assert failure.expectation == "expect_table_columns_to_match_set"
    assert "missing columns ['debt']" in failure.message
    assert report.frame is None and report.normalized is None


def test_extra_column(data, raw_ensemble):
    raw, _ = data
    failure = only(validate_inputs(raw.assign(customer_id=1), raw_ensemble))
    assert "unexpected columns ['customer_id']" in failure.message


def test_string_column_is_not_normalized(data, raw_ensemble):
    raw, _ = data
    bad = raw.assign(income=raw["income"].map(lambda v: f"{v:.1f} EUR"))
    report = validate_inputs(bad, raw_ensemble)
    failure = only(report)
    assert failure.expectation == "expect_column_values_to_be_in_type_list"
    assert failure.message.startswith("column 'income' has type str, not numeric (e.g. [")
    flags = only(validate_inputs(raw.assign(income=raw["income"] > 50), raw_ensemble))
    assert flags.message.endswith(": write True/False as 1/0")  # QA: bool columns
    assert report.normalized is None  # the range stage never ran


def test_empty_frame(data, raw_ensemble):
    raw, _ = data
    report = validate_inputs(raw.iloc[:0], raw_ensemble)
    assert only(report).message == "the frame has no rows: give at least one row of data"


def test_label_with_three_classes(data, raw_ensemble):
    raw, y = data
    labels = y.copy()
    labels.iloc[:3] = 2
    report = validate_inputs(raw.assign(label=labels), raw_ensemble, label="label")
    messages = [f.message for f in report.failures]
    assert not report.success
    assert messages == [
        "label column 'label' has 3 classes [0, 1, 2]; a binary label needs exactly two",
        "label column 'label' has values [2] outside the ensemble's classes [0, 1]",
    ]


def test_unlabelled_rows_fail_an_expectation_of_their_own(data, raw_ensemble):
    """The count agrees with the verdict (QA: "FAILED: 94 of 94 expectations met")."""
    raw, y = data
    labels = y.astype(float)
    labels.iloc[[3, 7]] = np.nan
    report = validate_inputs(raw.assign(label=labels), raw_ensemble, label="label")
    assert report.summary().startswith("Input validation FAILED: 16 of 17 expectations met")
    assert only(report).message == (
        "label column 'label': 2 rows without a label (null/NaN); every row needs one: label "
        "them or drop them (rows 3, 7)"
    )


def test_integer_category_codes_of_a_histogram_model_are_checked_by_value():
    """HistGradientBoosting's categorical_features on integer codes: the categories seen
    are numpy integers, which Great Expectations could not serialize (TypeError)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"region": rng.integers(0, 4, 300), "income": rng.normal(40, 10, 300)})
    y = (X["region"].isin([1, 2]) & (X["income"] > 38)).astype(int)
    model = HistGradientBoostingClassifier(max_iter=5, categorical_features=[0], random_state=0)
    ensemble = read_ensemble(model.fit(X, y), native=True)
    report = validate_inputs(X.assign(label=y), ensemble, label="label")
    assert report.success, report.summary()
    failure = only(validate_inputs(X.assign(region=X["region"].replace(3, 7)), ensemble))
    assert failure.column == "region" and "7" in failure.message


def test_not_a_frame(raw_ensemble):
    with pytest.raises(TypeError, match="needs a pandas DataFrame"):
        validate_inputs(np.zeros((2, 4)), raw_ensemble)


def test_cli_validate_exit_codes(store, tmp_path, data, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from miret_governance.cli.gates import register

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    raw, y = data
    pipe = make_pipeline(MinMaxScaler(), RandomForestClassifier(n_estimators=2, max_depth=2))
    pipe.fit(raw, y)
    register_sklearn(pipe, "credit-rf", experiment_id=store)
    raw.to_csv(tmp_path / "clean.csv", index=False)
    raw.assign(debt=raw["debt"] * 3).to_csv(tmp_path / "drift.csv", index=False)
    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def run(*args):
        return runner.invoke(app, ["validate", "--model-uri", "models:/credit-rf/1", *args])

    ok = run("--data", str(tmp_path / "clean.csv"), "--report", str(tmp_path / "ge.json"))
    assert ok.exit_code == 0, ok.output
    assert "Input validation passed" in ok.output
    assert json.loads((tmp_path / "ge.json").read_text())["success"] is True
    drift = run("--data", str(tmp_path / "drift.csv"))
    assert drift.exit_code == 1 and "column 'debt'" in drift.output
    assert run("--data", str(tmp_path / "drift.csv"), "--mostly", "0.2").exit_code == 0
    # QA: validate failed a file with an id column that explain validated and passed
    raw.assign(customer_id=1).to_csv(tmp_path / "ids.csv", index=False)
    ids = run("--data", str(tmp_path / "ids.csv"))
    assert ids.exit_code == 0, ids.output
    assert "(not used by the model, not checked: ['customer_id'])" in ids.output
    missing = run("--data", str(tmp_path / "nope.csv"))
    assert missing.exit_code == 2 and "nope.csv does not exist" in missing.output
    bad_uri = runner.invoke(
        app, ["validate", "--model-uri", "models:/nope/1", "--data", str(tmp_path / "clean.csv")]
    )
    assert bad_uri.exit_code == 2 and "error:" in bad_uri.output


def test_preprocessing_that_rejects_the_data_is_reported(data):
    from sklearn.decomposition import PCA

    raw, y = data
    forest = RandomForestClassifier(n_estimators=2, max_depth=2, random_state=0)
    ensemble = read_ensemble(make_pipeline(PCA(n_components=4), forest).fit(raw, y))
    bad = raw.copy()
    bad.loc[1, "age"] = np.nan
    report = validate_inputs(bad, ensemble)
    messages = [f.message for f in report.failures]
    assert not report.success and len(messages) == 2
    assert messages[1].startswith("the ensemble's preprocessing failed on this data: Input X")
    assert report.to_json()["meta"]["preprocessing_error"] == messages[1]


def test_validate_checks_the_training_range_stored_with_the_surrogate(store, data, tmp_path):
    """XGBoost on raw features has no scaler: its explain run learns the training range,
    stores it in the surrogate, and `validate` checks new data against it."""
    import mlflow
    import xgboost

    from miret_governance.flavors.explain.explain import explain_model_version
    from miret_governance.flavors.gates.gating import validate_model_inputs

    raw, y = data
    model = xgboost.XGBClassifier(n_estimators=5, max_depth=2, random_state=0).fit(raw, y)
    with mlflow.start_run(experiment_id=store):
        mlflow.xgboost.log_model(
            model, name="model", registered_model_name="raw-xgb", pip_requirements=["xgboost"]
        )
    raw.assign(label=y).to_csv(tmp_path / "train.csv", index=False)
    unlinked = validate_model_inputs("models:/raw-xgb/1", tmp_path / "train.csv", "label")
    assert unlinked.success  # no surrogate yet: only the schema, no range to check
    explain_model_version(
        "models:/raw-xgb/1", tmp_path / "train.csv", "label", time_limit=5, min_test_rows=1
    )

    assert validate_model_inputs("models:/raw-xgb/1", tmp_path / "train.csv", "label").success
    drifted = raw.assign(income=raw["income"] * 3, label=y)  # up to 300, trained up to ~100
    drifted.to_csv(tmp_path / "new.csv", index=False)
    report = validate_model_inputs("models:/raw-xgb/1", tmp_path / "new.csv", "label")
    assert not report.success
    assert [f.column for f in report.failures] == ["income"]
    assert report.results["meta"]["training_range"]["income"] == pytest.approx(
        [raw["income"].min(), raw["income"].max()]
    )
    assert "outside the training range" in report.failures[0].message
    # the range is believed only from evidence a key of the given policy signed
    untrusting = tmp_path / "untrusting.toml"
    untrusting.write_text("[gates]\nmin_fidelity = 0.5\n")
    with pytest.raises(SignatureError, match="which the policy does not trust for explain"):
        validate_model_inputs("models:/raw-xgb/1", tmp_path / "new.csv", "label", policy=untrusting)


# ------------------------------------------------------------------ the validation worker
def _as_json(outcomes):
    return json.loads(json.dumps(outcomes, default=str))


def _without_ids_and_times(outcomes):
    """Outcomes without what differs between any two runs: GE's ids, times and meta."""
    for outcome in outcomes.values():
        outcome["results"].pop("meta")
        for result in outcome["results"]["results"]:
            result["expectation_config"].pop("id")
    return outcomes


def _started_worker(monkeypatch):
    """A worker with its child, as in a process that has not imported GE nor started a
    child yet."""
    from miret_governance.flavors.explain.validation_worker import ValidationWorker

    with monkeypatch.context() as patch:
        patch.delitem(sys.modules, "great_expectations", raising=False)
        patch.setattr(ValidationWorker, "_started_once", False)
        return ValidationWorker()


def test_a_process_starts_one_child_at_most(monkeypatch):
    """The second explain of a process validates in place: its worker has no child."""
    from miret_governance.flavors.explain.validation_worker import ValidationWorker

    monkeypatch.delitem(sys.modules, "great_expectations", raising=False)
    monkeypatch.setattr(ValidationWorker, "_started_once", False)
    first = ValidationWorker()
    try:
        assert first._process is not None
        second = ValidationWorker()
        assert second._process is None
    finally:
        first.close()


def test_worker_process_validates_like_this_process(data, raw_ensemble, monkeypatch):
    from miret_governance.flavors.explain.validation_worker import validate_frames

    raw, y = data
    clean = raw.assign(label=y)
    broken = clean.copy()
    broken.loc[3, "income"] = 1e6  # beyond the training range
    broken.loc[5, "debt"] = np.nan
    frames = {"validation.json": clean, "validation_test.json": broken}
    with _started_worker(monkeypatch) as worker:
        remote = worker.validate(frames, raw_ensemble, "label")
    local = _as_json(validate_frames(frames, raw_ensemble, "label"))
    assert remote["validation.json"]["results"]["meta"]["active_batch_definition"]
    assert _without_ids_and_times(remote) == _without_ids_and_times(local)
    assert remote["validation.json"]["success"] and remote["validation.json"]["sound"]
    failed = remote["validation_test.json"]
    assert not failed["success"] and failed["sound"]  # a null is normalized as a null
    assert "income" in failed["summary"] and "debt" in failed["summary"]


def test_without_a_usable_child_validation_stays_in_this_process(
    data, raw_ensemble, caplog, monkeypatch
):
    from miret_governance.flavors.explain.validation_worker import ValidationWorker

    raw, y = data
    frames = {"validation.json": raw.assign(label=y)}
    validate_inputs(raw, raw_ensemble)  # imports Great Expectations in this process
    with caplog.at_level("WARNING", logger="miret_governance.flavors.explain.validation_worker"):
        assert ValidationWorker().validate(frames, raw_ensemble, "label") is None
    worker_logs = [r for r in caplog.records if r.name.endswith("validation_worker")]
    assert worker_logs == []  # no child was started: nothing failed (GE's own import
    # warnings may be logged here when this test runs first in its process)

    worker = _started_worker(monkeypatch)
    worker.close()  # the child is gone before it is asked
    with caplog.at_level("WARNING", logger="miret_governance.flavors.explain.validation_worker"):
        assert worker.validate(frames, raw_ensemble, "label") is None
    assert "validating in this process" in caplog.text


@pytest.fixture(scope="module")
def grades(data):
    """A three-class forest on raw units: grade A, B or C by income - debt."""
    raw, _ = data
    margin = raw["income"] - raw["debt"]
    y = pd.Series(np.where(margin > 20, "A", np.where(margin > -20, "B", "C")), name="grade")
    forest = RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0)
    return read_ensemble(make_pipeline(MinMaxScaler(), forest).fit(raw, y)), y


def test_a_label_with_some_of_three_classes_is_valid(data, grades):
    raw, _ = data
    ensemble, y = grades
    assert ensemble.classes.tolist() == ["A", "B", "C"]
    assert validate_inputs(raw.assign(grade=y), ensemble, label="grade").success
    only_two = (y != "C").to_numpy()
    report = validate_inputs(raw[only_two].assign(grade=y[only_two]), ensemble, label="grade")
    assert report.success, report.summary()


def test_a_label_outside_three_classes_is_named(data, grades):
    raw, _ = data
    ensemble, y = grades
    labels = y.copy()
    labels.iloc[:2] = "D"
    report = validate_inputs(raw.assign(grade=labels), ensemble, label="grade")
    assert [f.message for f in report.failures] == [
        (
            "label column 'grade' has 4 classes ['A', 'B', 'C', 'D']; the ensemble has 3 "
            "classes, so the label needs 2 to 3 of them"
        ),
        "label column 'grade' has values ['D'] outside the ensemble's classes ['A', 'B', 'C']",
    ]
    one = raw.assign(grade="B")
    assert [f.message for f in validate_inputs(one, ensemble, label="grade").failures] == [
        (
            "label column 'grade' has 1 class ['B']; the ensemble has 3 classes, so the label "
            "needs 2 to 3 of them"
        )
    ]
