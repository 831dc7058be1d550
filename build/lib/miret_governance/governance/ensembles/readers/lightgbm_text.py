"""LightGBM's text model (``Booster.model_to_string``, MLflow's ``model.lgb``) read in
Python into checked :class:`~governance.trees.Tree` arrays.

Why our own reader: the model file is the trust boundary. LightGBM's C++ parser, like
XGBoost's and treelite's importers, trusts the file it reads (a crafted child index is
followed without a bound check), so a registered file must never reach it; and the
format is plain ``key=value`` lines, read here with every count and index bounded and
refused with :class:`~governance.trees.MalformedModelError` otherwise. LightGBM is not
needed to explain a LightGBM model.

Read: binary models (``objective=binary``, one tree per iteration) and multiclass models
(``objective=multiclass``, ``num_class = num_tree_per_iteration = k > 2`` trees per
iteration, tree ``i`` adding to class ``i mod k``'s margin, softmax), numerical splits
(``x <= threshold`` goes left, compared in float64; a NaN takes the node's default
direction, or is read as 0.0 where the feature had no missing values in training, as
LightGBM does), leaf values that already carry the learning rate; the ``sigmoid``
factor of the objective is folded into the leaf values. Categorical splits
(``decision_type`` bit 1): the node's ``threshold`` indexes ``cat_boundaries``, whose
range of ``cat_threshold`` is a bitset of the codes sent left; LightGBM sends a NaN, a
negative code (``trunc(x) < 0``) and any code outside the set right. With
``pandas_categorical`` (a Booster trained on a DataFrame with category columns) the
model is read in one-hot space (:mod:`governance.native_categories`).
Refused with a reason: linear trees, ``zero_as_missing`` (zeros
would follow each node's default direction), averaged output (``boosting=rf``), one
sigmoid per class (``multiclassova``) and any other objective.
"""

from __future__ import annotations

import json

import numpy as np

from miret_governance.governance.ensembles.native_categories import lightgbm_categories
from miret_governance.governance.ensembles.readers.sklearn import check_classes
from miret_governance.governance.ensembles.trees import (
    LEFT_IF_LESS_EQUAL,
    MAX_CATEGORY_CODE,
    MalformedModelError,
    Tree,
    UnsupportedModelError,
    check_split_features,
)

MAX_TEXT_CHARS = 1 << 30
"""Largest model text read (1 GiB)."""
MAX_LEAVES = 1 << 17
"""Most leaves per tree accepted (LightGBM's ``num_leaves`` is at most 131072)."""
LIGHTGBM = "LightGBM model"
_CATEGORICAL, _DEFAULT_LEFT = 1, 2
_MISSING_ZERO, _MISSING_NAN = 1, 2


class LightGBMText:
    """A LightGBM text model as read from a file, for :func:`governance.readers.read_ensemble`.

    Parameters
    ----------
    text : str
        The model file's content.
    classes : sequence, optional
        The ``k`` class labels (default ``0 .. k-1``, as a Booster predicts).
    feature_names : sequence of str, optional
        The columns' own names (LightGBM writes spaces as ``_``); taken when each, with
        whitespace written as ``_``, is the model's name, or the model's names are
        LightGBM's defaults ``Column_<j>``.
    """

    def __init__(self, text: str, classes=None, feature_names=None):
        self.text = text
        self.classes = None if classes is None else tuple(classes)
        self.feature_names = None if feature_names is None else [str(n) for n in feature_names]

    def __repr__(self) -> str:
        return f"LightGBMText({len(self.text)} characters)"


def _key_values(lines) -> dict:
    values = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


def _numbers(values: dict, key: str, count: int, dtype, what: str) -> np.ndarray:
    text = values.get(key)
    if text is None:
        raise MalformedModelError(f"{what} has no {key}")
    try:
        array = np.array(text.split(), dtype=dtype) if text else np.zeros(0, dtype)
    except (ValueError, OverflowError) as error:
        raise MalformedModelError(f"{what}: {key} is not a list of numbers ({error})") from error
    if array.shape != (count,):
        raise MalformedModelError(f"{what}: {key} has {array.size} entries, not {count}")
    return array


def _tree(values: dict, what: str, sigmoid: float) -> Tree:
    """One ``Tree=`` block: internal nodes keep their ids, leaf ``k`` (stored as child
    ``~k``) becomes node ``num_leaves - 1 + k``."""
    try:
        n_leaves = int(values.get("num_leaves", ""))
    except ValueError:
        raise MalformedModelError(f"{what} has no whole num_leaves") from None
    if not 1 <= n_leaves <= MAX_LEAVES:
        raise MalformedModelError(f"{what} has num_leaves = {n_leaves}, not 1 to {MAX_LEAVES}")
    if values.get("is_linear", "0") != "0":
        raise UnsupportedModelError(LIGHTGBM, f"{what} is a linear tree (linear_tree=true)")
    leaf_value = _numbers(values, "leaf_value", n_leaves, np.float64, what) * sigmoid
    n_internal = n_leaves - 1
    if n_internal == 0:
        return Tree(
            feature=np.array([-1]),
            threshold=np.array([np.nan]),
            left=np.array([-1]),
            right=np.array([-1]),
            value=leaf_value,
        )
    feature = _numbers(values, "split_feature", n_internal, np.int64, what)
    threshold = _numbers(values, "threshold", n_internal, np.float64, what)
    decision = _numbers(values, "decision_type", n_internal, np.int64, what)
    children = [
        _numbers(values, key, n_internal, np.int64, what) for key in ("left_child", "right_child")
    ]
    categorical = (decision & _CATEGORICAL) > 0
    category_left = _category_sets(values, threshold, categorical, what)
    if np.any(((decision >> 2) & 3) == _MISSING_ZERO):
        raise UnsupportedModelError(
            LIGHTGBM,
            f"{what} treats zero as missing (zero_as_missing=true): zeros follow each "
            "node's default direction, which the ensemble view does not model; re-train "
            "without it",
        )
    for child in children:
        if np.any((child < -n_leaves) | (child >= n_internal)):
            raise MalformedModelError(f"{what} names a child outside its {n_leaves} leaves")
    left, right = (np.where(c >= 0, c, n_internal + ~c) for c in children)
    leaf = np.full(n_leaves, -1)
    # missing type NaN: a NaN takes the node's default direction; type None: LightGBM
    # reads a NaN as 0.0
    nan_missing = ((decision >> 2) & 3) == _MISSING_NAN
    missing_left = np.where(nan_missing, (decision & _DEFAULT_LEFT) > 0, 0.0 <= threshold)
    missing_left &= ~categorical  # LightGBM sends a NaN right at a categorical split
    threshold = np.where(categorical, np.nan, threshold)
    return Tree(
        feature=np.concatenate([feature, leaf]),
        threshold=np.concatenate([threshold, np.full(n_leaves, np.nan)]),
        left=np.concatenate([left, leaf]),
        right=np.concatenate([right, leaf]),
        value=np.concatenate([np.zeros(n_internal), leaf_value]),
        missing_left=np.concatenate([missing_left, np.zeros(n_leaves, dtype=bool)]),
        category_left=category_left + (None,) * n_leaves,
    )


def _category_sets(values: dict, threshold, categorical, what: str) -> tuple:
    """The codes each categorical node sends left (None at numeric nodes): node ``i``'s
    ``threshold`` indexes ``cat_boundaries``, which bound its words of ``cat_threshold``."""
    try:
        n_cat = int(values.get("num_cat", "0"))
    except ValueError:
        raise MalformedModelError(f"{what} has no whole num_cat") from None
    if n_cat != int(categorical.sum()):
        raise MalformedModelError(
            f"{what} has num_cat={n_cat} but {int(categorical.sum())} categorical splits"
        )
    if n_cat == 0:
        return (None,) * threshold.size
    bounds = _numbers(values, "cat_boundaries", n_cat + 1, np.int64, what)
    words_per_set = np.diff(bounds)
    if bounds[0] != 0 or np.any(words_per_set < 1):
        raise MalformedModelError(f"{what}: cat_boundaries do not rise from 0")
    if words_per_set.max() * 32 > MAX_CATEGORY_CODE + 1:
        raise UnsupportedModelError(
            LIGHTGBM, f"{what} splits on category codes above {MAX_CATEGORY_CODE}"
        )
    words = _numbers(values, "cat_threshold", int(bounds[-1]), np.int64, what)
    if np.any((words < 0) | (words >= 1 << 32)):
        raise MalformedModelError(f"{what}: cat_threshold holds a word outside 32 bits")
    sets = [None] * threshold.size
    for node in np.flatnonzero(categorical):
        index = threshold[node]
        if not (index == int(index) and 0 <= index < n_cat):
            raise MalformedModelError(f"{what}: node {node} names no category set")
        chunk = words[bounds[int(index)] : bounds[int(index) + 1]].astype("<u4")
        sets[node] = np.flatnonzero(np.unpackbits(chunk.view(np.uint8), bitorder="little"))
    return tuple(sets)


def _classes(header: dict) -> int:
    """The number of classes ``k`` the header's objective and counts declare."""
    words = header.get("objective", "").split()
    if words[:1] == ["binary"]:
        for key in ("num_class", "num_tree_per_iteration"):
            if header.get(key, "1") != "1":
                raise MalformedModelError(f"a binary model has {key}={header[key]}")
        return 2
    if words[:1] != ["multiclass"]:
        raise UnsupportedModelError(
            LIGHTGBM,
            f"its objective is {header.get('objective', '')!r}; only objective=binary (two "
            "classes) and objective=multiclass (softmax) are read",
        )
    try:
        k = int(header.get("num_class", ""))
    except ValueError:
        raise MalformedModelError("num_class is not a whole number") from None
    if header.get("num_tree_per_iteration") != str(k) or f"num_class:{k}" not in words:
        raise MalformedModelError(
            f"num_class={k} disagrees with num_tree_per_iteration or the objective"
        )
    if k == 2:
        raise UnsupportedModelError(
            LIGHTGBM,
            "it is objective=multiclass with 2 classes (two softmax margins); re-train it "
            "with objective=binary, which is the same model for two classes",
        )
    if k < 2:
        raise MalformedModelError(f"a multiclass model has num_class={k}")
    return k


def _sigmoid(objective: str) -> float:
    """The ``sigmoid:<x>`` factor of a binary objective (1 for multiclass)."""
    words = objective.split()
    if words[:1] == ["multiclass"]:
        return 1.0
    factors = [w.split(":", 1)[1] for w in words[1:] if w.startswith("sigmoid:")]
    try:
        factor = float(factors[0]) if factors else 1.0
    except ValueError:
        raise MalformedModelError(f"objective {objective!r} has no numeric sigmoid") from None
    if not np.isfinite(factor) or factor <= 0:
        raise MalformedModelError(f"objective {objective!r}: sigmoid must be positive")
    return factor


def _own_names(stored: list, given) -> list:
    """``given`` when it names the same columns as the model's ``stored`` names."""
    if given is None or len(given) != len(stored):
        return stored
    defaults = [f"Column_{j}" for j in range(len(stored))]
    written = ["".join("_" if c.isspace() else c for c in name) for name in given]
    return list(given) if stored in (written, defaults) else stored


def read_lightgbm_text(model: LightGBMText) -> dict:
    """The read of :func:`governance.readers.read_estimator` for a LightGBM text model.

    Raises
    ------
    UnsupportedModelError
        A model of a kind not read (see the module docstring), naming it.
    MalformedModelError
        Anything inconsistent: counts, indices, numbers.
    """
    text = model.text
    if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS:
        raise MalformedModelError("the LightGBM model is not text of at most 1 GiB")
    head, _, rest = text.partition("\nTree=")
    header = _key_values(head.splitlines())
    if head.splitlines()[:1] != ["tree"] or "max_feature_idx" not in header:
        raise MalformedModelError("it is not a LightGBM text model (no 'tree' header)")
    k = _classes(header)
    if "average_output" in header or "average_output" in head.splitlines():
        raise UnsupportedModelError(LIGHTGBM, "it averages its trees (boosting=rf), not read yet")
    sigmoid = _sigmoid(header.get("objective", ""))
    try:
        n_features = int(header["max_feature_idx"]) + 1
    except ValueError:
        raise MalformedModelError("max_feature_idx is not a whole number") from None
    names = header.get("feature_names", "").split()
    if n_features < 1 or len(names) != n_features:
        raise MalformedModelError(
            f"feature_names lists {len(names)} names for {n_features} features"
        )
    names = _own_names(names, model.feature_names)
    body = rest.partition("\nend of trees")[0]
    blocks = [b.strip().splitlines() for b in ("Tree=" + body).split("\n\n") if b.strip()]
    trees = []
    for number, block in enumerate(blocks):
        if block[0].strip() != f"Tree={number}":
            raise MalformedModelError(f"tree block {number} starts with {block[0][:40]!r}")
        trees.append(_tree(_key_values(block[1:]), f"tree {number}", sigmoid))
    if not trees or not rest:
        raise MalformedModelError("the LightGBM model has no trees")
    width = 1 if k == 2 else k
    if len(trees) % width:
        raise MalformedModelError(f"{len(trees)} trees are no whole number of iterations of {k}")
    check_split_features(trees, n_features)
    native = _native(head, rest, names)
    classes = tuple(range(k)) if model.classes is None else model.classes
    if len(classes) != k:
        raise MalformedModelError(f"{len(classes)} class labels given for a model of {k} classes")
    return {
        "trees": tuple(trees),
        "tree_class": np.arange(len(trees)) % width,
        "tree_weights": None,
        "aggregation": "margin",
        "base_margin": 0.0 if k == 2 else np.zeros(k),
        "left_if": LEFT_IF_LESS_EQUAL,
        "classes": np.asarray(classes),
        "feature_names": names,
        "input_precision": "float64",
        "native": native,
    }


def _native(head: str, rest: str, names: list):
    """The model's native categories from its ``pandas_categorical`` line, or None when
    it has none (then categorical splits read codes)."""
    tail = rest.rpartition("\npandas_categorical:")[2] if "\npandas_categorical:" in rest else ""
    try:
        listed = json.loads(tail.strip().splitlines()[0]) if tail.strip() else None
    except (ValueError, RecursionError) as error:
        raise MalformedModelError(f"pandas_categorical is not JSON ({error})") from error
    if not listed:
        return None
    infos = _key_values(head.splitlines()).get("feature_infos", "").split()
    categorical = [j for j, info in enumerate(infos) if info[:1] not in ("[", "n")]
    for line in rest.splitlines():  # the parameter also names unused (trivial) columns
        if line.startswith("[categorical_feature: ") and line.endswith("]"):
            words = line[len("[categorical_feature: ") : -1].split(",")
            if all(w.strip().isdigit() for w in words):
                categorical = [int(w) for w in words]
    if sorted(set(categorical)) != categorical or not all(0 <= j < len(names) for j in categorical):
        raise MalformedModelError(f"categorical_feature {categorical} names no features")
    return lightgbm_categories(names, categorical, listed)


def read_lightgbm(model) -> dict:
    """A LightGBM text model, or an in-memory ``lightgbm.Booster`` or ``LGBMClassifier``
    through its text model (the LightGBM entry of
    :data:`governance.readers.reading.LIBRARIES`)."""
    if isinstance(model, LightGBMText):
        return read_lightgbm_text(model)
    import lightgbm

    if isinstance(model, lightgbm.LGBMClassifier):
        classes = getattr(model, "classes_", None) if model.__sklearn_is_fitted__() else None
        check_classes(model, classes)
        names = getattr(model, "feature_names_in_", None)
        read = read_lightgbm_text(LightGBMText(model.booster_.model_to_string(), classes, names))
        if names is not None and read["native"] is None:
            read["feature_names"] = [str(n) for n in model.feature_names_in_]
        return read
    if isinstance(model, lightgbm.Booster):
        return read_lightgbm_text(LightGBMText(model.model_to_string()))
    raise UnsupportedModelError(model, "it is not a LightGBM classifier or Booster")
