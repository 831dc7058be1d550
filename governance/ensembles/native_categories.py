"""Models with native categorical columns (LightGBM's, HistGradientBoosting's), seen in
one-hot space.

The trees of such a model read each categorical column as a category code (LightGBM:
the position in ``pandas_categorical``; HistGradientBoosting: the position in its
``OrdinalEncoder``'s categories). A surrogate cannot split on codes meaningfully, so the
ensemble view takes one indicator column per category instead (``purpose_car``, in code
order) and its trees read each group back as a code
(:func:`governance.categories.code_matrix`). :class:`NativeCategories` is that view's
preprocessor: raw rows (category values, as in a CSV file) to indicator columns, a value
missing or not seen in training to all zeros, which the trees route as the library
routes a missing or unknown category. Its :attr:`NativeCategories.encoding` is the
:class:`~governance.encoding.Encoding` every artifact speaks through: rules as
``purpose in {car, edu}``, VITE per original column, unseen categories reported by
validation and refused by :meth:`~governance.encoding.Encoding.encode`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from miret_governance.governance.ensembles.encoding import (
    NUMERIC,
    ONE_HOT,
    EncodedColumn,
    Encoding,
)
from miret_governance.governance.ensembles.trees import (
    MalformedModelError,
    Tree,
    UnsupportedModelError,
)
from miret_governance.governance.errors import InvalidInputError, UnknownNameError


def category_label(value) -> str:
    """A category as written in column names and rules (``3.0`` as ``3``)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True)
class NativeCategories:
    """Raw rows to the one-hot view of a model with native categorical columns.

    Attributes
    ----------
    inputs : tuple of str
        The model's features in the order its trees number them.
    categories : dict
        Categorical feature name -> its categories in code order (code ``i`` is
        ``categories[name][i]``).
    feature_names_in_ : ndarray of str
        The columns raw rows hold, in the order a matrix without names gives them.
    library : str
        The library whose codes these are, for messages.
    """

    inputs: tuple
    categories: dict
    feature_names_in_: np.ndarray
    library: str

    def __post_init__(self):
        unknown = set(self.categories) - set(self.inputs)
        if unknown or len(set(self.inputs)) != len(self.inputs):
            raise MalformedModelError(
                f"the categorical columns {sorted(unknown)} are not among the model's "
                "distinct features"
            )
        for name, values in self.categories.items():
            if not values or len({category_label(v) for v in values}) != len(values):
                raise MalformedModelError(f"the categories of {name!r} are empty or repeat a value")
        names = self.encoding.names
        if len(set(names)) != len(names):
            raise UnsupportedModelError(
                f"{self.library} model",
                "its one-hot column names (column_category) collide with another column; "
                "rename the column or the category",
            )

    @property
    def encoding(self) -> Encoding:
        """The one-hot view's columns in original terms."""
        columns = []
        for name in self.inputs:
            if name in self.categories:
                columns += [
                    EncodedColumn(f"{name}_{category_label(c)}", name, ONE_HOT, (c,))
                    for c in self.categories[name]
                ]
            else:
                columns.append(EncodedColumn(name, name, NUMERIC))
        seen = {name: tuple(values) for name, values in self.categories.items()}
        return Encoding(tuple(columns), tuple(self.inputs), seen, native=True)

    @property
    def groups(self) -> tuple:
        """``(start, width)`` of each categorical column's indicator group."""
        groups, start = [], 0
        for name in self.inputs:
            width = len(self.categories.get(name, (None,)))
            if name in self.categories:
                groups.append((start, width))
            start += width
        return tuple(groups)

    def view_index(self) -> np.ndarray:
        """The one-hot view's feature index of each model feature (a group's first)."""
        widths = [len(self.categories.get(name, (None,))) for name in self.inputs]
        return np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)

    def codes(self, frame) -> np.ndarray:
        """Raw rows as the model's inputs: category codes (NaN for a missing or unseen
        category, as the library maps them) and numeric columns, in model order.

        Raises
        ------
        KeyError
            A column of the model is missing.
        ValueError
            A numeric column holds a value that is not a number.
        """
        frame = _frame(frame, self.feature_names_in_)
        out = np.empty((len(frame), len(self.inputs)))
        for j, name in enumerate(self.inputs):
            if name in self.categories:
                known = pd.Index(list(self.categories[name]))
                code = known.get_indexer(pd.Series(frame[name]).astype(object)).astype(float)
                code[code < 0] = np.nan
                out[:, j] = code
            else:
                out[:, j] = np.asarray(frame[name], dtype=np.float64)  # a string is refused
        return out

    def transform(self, frame) -> np.ndarray:
        """Raw rows in the one-hot view: one indicator per category (all 0 for a missing
        or unseen category) and the numeric columns."""
        codes = self.codes(frame)
        out = np.zeros((codes.shape[0], len(self.encoding.columns)))
        starts = self.view_index()
        for j, name in enumerate(self.inputs):
            if name not in self.categories:
                out[:, starts[j]] = codes[:, j]
                continue
            known = ~np.isnan(codes[:, j])
            rows = np.flatnonzero(known)
            out[rows, starts[j] + codes[known, j].astype(np.int64)] = 1.0
        return out


def _frame(frame, names) -> pd.DataFrame:
    if isinstance(frame, pd.DataFrame):
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise UnknownNameError(f"the rows lack the model's columns {missing[:5]}")
        return frame
    matrix = np.asarray(frame, dtype=object)
    if matrix.ndim != 2 or matrix.shape[1] != len(names):
        raise InvalidInputError(
            f"rows of {len(names)} columns are needed, got shape {matrix.shape}"
        )
    return pd.DataFrame(matrix, columns=list(names))


def native_view(read: dict, native: NativeCategories) -> dict:
    """A reader's result (trees over the model's features, categorical ones as codes)
    as its one-hot view: features renumbered, groups and preprocessor set.

    Raises
    ------
    MalformedModelError
        A categorical split on a numeric column, or a numeric split on a categorical
        one (no library writes either).
    """
    if list(read["feature_names"]) != list(native.inputs):
        raise MalformedModelError(
            f"the model's features {read['feature_names'][:5]} differ from the columns its "
            f"categories name {list(native.inputs)[:5]}"
        )
    categorical = np.array([name in native.categories for name in native.inputs])
    index = native.view_index()
    trees = []
    for number, tree in enumerate(read["trees"]):
        split = tree.is_split
        if np.any(tree.is_categorical != (split & categorical[np.maximum(tree.feature, 0)])):
            raise MalformedModelError(
                f"tree {number} splits a categorical column by a threshold or a numeric "
                "column by categories"
            )
        highest = {
            native.inputs[f]: int(codes.max(initial=-1))
            for f, codes in zip(tree.feature, tree.category_left, strict=True)
            if codes is not None
        }
        for name, code in highest.items():
            if code >= len(native.categories[name]):
                raise MalformedModelError(
                    f"tree {number} sends code {code} of {name!r} left; it has "
                    f"{len(native.categories[name])} categories"
                )
        trees.append(replace(tree, feature=np.where(split, index[tree.feature], -1)))
    return {
        **read,
        "trees": tuple(trees),
        "feature_names": list(native.encoding.names),
        "category_groups": native.groups,
        "preprocessor": native,
    }


def _hist_known(model, f: int, n_categories: int) -> np.ndarray:
    """The codes HistGradientBoosting knows for categorical feature ``f``."""
    known = np.asarray(model._bin_mapper.bin_thresholds_[f], dtype=np.float64)
    if known.ndim != 1 or not np.all((known >= 0) & (known < n_categories)):
        raise MalformedModelError(f"the known categories of feature {f} are not its codes")
    return known.astype(np.int64)


def hist_categories(model) -> tuple:
    """HistGradientBoosting's native categories: the :class:`NativeCategories` of its
    ``_preprocessor`` (an OrdinalEncoder of the categorical columns first, then the
    others) and the codes known per model feature.

    Raises
    ------
    UnsupportedModelError, MalformedModelError
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OrdinalEncoder

    prep = model._preprocessor
    mask = np.asarray(getattr(model, "is_categorical_", None), dtype=bool)
    encoder = getattr(prep, "named_transformers_", {}).get("encoder")
    if not isinstance(prep, ColumnTransformer) or not isinstance(encoder, OrdinalEncoder):
        raise UnsupportedModelError(model, "its categorical preprocessing is not an OrdinalEncoder")
    n_features = mask.size
    names = getattr(model, "feature_names_in_", None)
    names = [str(n) for n in names] if names is not None else [f"x{j}" for j in range(n_features)]
    order = np.concatenate([np.flatnonzero(mask), np.flatnonzero(~mask)])
    if len(names) != n_features or len(encoder.categories_) != int(mask.sum()):
        raise MalformedModelError("the categorical mask, names and encoder disagree")
    inputs = tuple(names[j] for j in order)
    categories = {}
    for name, values in zip(inputs, encoder.categories_, strict=False):
        values = list(values)
        if values and pd.isna(values[-1]):  # the encoder lists NaN last; it is missing
            values = values[:-1]
        categories[name] = tuple(values)
    native = NativeCategories(inputs, categories, np.asarray(names, dtype=object), "scikit-learn")
    known = [
        _hist_known(model, f, len(categories[inputs[f]])) if f < len(categories) else None
        for f in range(n_features)
    ]
    return native, known


def hist_tree(nodes, raw_left_cat_bitsets, known) -> Tree:
    """One HistGradientBoosting predictor's nodes, its categorical splits read from
    ``raw_left_cat_bitsets`` (8 words of 32 bits per split: codes 0..255)."""
    bitsets = np.asarray(raw_left_cat_bitsets)
    leaf = nodes["is_leaf"].astype(bool)
    feature = np.where(leaf, -1, nodes["feature_idx"].astype(np.int64))
    category_left, category_known = [None] * leaf.size, [None] * leaf.size
    for node in np.flatnonzero(nodes["is_categorical"].astype(bool) & ~leaf):
        f, index = int(feature[node]), int(nodes["bitset_idx"][node])
        if not (0 <= f < len(known) and known[f] is not None and 0 <= index < len(bitsets)):
            raise MalformedModelError(f"node {node} splits an unknown categorical feature")
        bits = np.unpackbits(
            np.asarray(bitsets[index], dtype="<u4").view(np.uint8), bitorder="little"
        )
        category_known[node] = known[f]
        category_left[node] = np.intersect1d(np.flatnonzero(bits), known[f])
    return Tree(
        feature=feature,
        threshold=np.where(leaf, np.nan, nodes["num_threshold"]),
        left=np.where(leaf, -1, nodes["left"].astype(np.int64)),
        right=np.where(leaf, -1, nodes["right"].astype(np.int64)),
        value=np.where(leaf, nodes["value"], 0.0),
        missing_left=nodes["missing_go_to_left"],
        category_left=tuple(category_left),
        category_known=tuple(category_known),
    )


def lightgbm_categories(model_names, categorical: list, pandas_categorical) -> NativeCategories:
    """LightGBM's native categories: ``pandas_categorical`` (one list of categories per
    categorical feature, in feature order) for the features ``categorical``."""
    if not isinstance(pandas_categorical, list) or len(pandas_categorical) != len(categorical):
        raise MalformedModelError(
            f"pandas_categorical lists {len(pandas_categorical or [])} columns, the model "
            f"has {len(categorical)} categorical features"
        )
    categories = {}
    for f, values in zip(categorical, pandas_categorical, strict=True):
        if not isinstance(values, list) or not all(
            isinstance(v, (str, int, float, bool)) for v in values
        ):
            raise MalformedModelError(f"the categories of feature {f} are not a list of values")
        categories[model_names[f]] = tuple(values)
    names = np.asarray(model_names, dtype=object)
    return NativeCategories(tuple(model_names), categories, names, "LightGBM")
