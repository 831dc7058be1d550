"""Encoded columns back to the original ones: which input column, and which category, each
column a pipeline's ``ColumnTransformer`` feeds the ensemble stands for.

A pipeline ``Pipeline([("prep", ColumnTransformer([...])), ("model", ensemble)])`` is
explained in its *encoded* space (the ensemble's own inputs), but people read the
original columns. :func:`encoding_of` reads the fitted transformer into an
:class:`Encoding`, which writes a split on an encoded column in original terms:

- one-hot column ``purpose_car``: ``purpose_car <= 0.5`` reads ``purpose not in {car}``
  (its negation ``purpose in {car}``);
- ordinal column ``purpose`` (codes ``0..K-1`` in the encoder's category order):
  ``purpose <= 1.5`` reads ``purpose in {car, education}``;
- passed-through numeric columns keep their raw units; behind a ``MinMaxScaler`` the
  threshold is mapped back to raw units (``x = (x_scaled - min_) / scale_``).

Supported transformers: ``OneHotEncoder`` (without ``drop`` or infrequent categories),
``OrdinalEncoder``, ``MinMaxScaler``, ``"passthrough"`` and ``"drop"``, on columns named
by a DataFrame the transformer was fitted on. A model's native categorical columns
(LightGBM, HistGradientBoosting) are one-hot columns too
(:mod:`governance.native_categories`).

:meth:`Encoding.described` is the encoding as people and files read it, one
:class:`ColumnEncoding` per original column (``provenance.encoding`` of the signed
evidence, the report's applicant panel); :meth:`Encoding.original_values` gives a row's
original values back (``bmi_band = obese``), :meth:`Encoding.original_count` the original
columns a set of encoded columns comes from (a one-hot group counts once).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from miret_governance.governance.errors import GovernanceError, UnknownNameError

UNSEEN_ADVICE = (
    "the model never learned from them (an encoder that ignores unknown categories scores "
    "them as none of the known ones), so they are refused: map them to a trained category "
    "or re-train with them"
)
"""What every refusal of categories not seen in training says to do."""

ONE_HOT, ORDINAL, NUMERIC = "one-hot", "ordinal", "numeric"
NATIVE_CATEGORICAL = "native_categorical"
RECORDED_KINDS = {ONE_HOT: "onehot", ORDINAL: "ordinal", NUMERIC: "numeric"}
"""How :class:`ColumnEncoding` names each kind (a model's native categorical columns:
:data:`NATIVE_CATEGORICAL`)."""


class EncodingError(GovernanceError, ValueError):
    """A pipeline's preprocessing that cannot be mapped back to its original columns.

    Exit code 2.
    """


@dataclass(frozen=True)
class EncodedColumn:
    """One column of the encoded space.

    Attributes
    ----------
    name : str
        The encoded column's name (``get_feature_names_out``).
    column : str
        The original input column.
    kind : {"one-hot", "ordinal", "numeric"}
    categories : tuple of str
        One-hot: the one category the column is 1 for; ordinal: every category in code
        order; numeric: empty.
    min_, scale_ : float
        A numeric column's ``MinMaxScaler`` (``x_scaled = x * scale_ + min_``); 0 and 1
        for a passed-through column.
    """

    name: str
    column: str
    kind: str
    categories: tuple = ()
    min_: float = 0.0
    scale_: float = 1.0

    def meets(self, threshold: float, op: str = "<=") -> tuple:
        """Categories whose encoded value meets ``value <op> threshold`` (one-hot: the
        column's category when 1 meets it, ``None`` standing for every other category
        when 0 does)."""
        values = [1.0, 0.0] if self.kind == ONE_HOT else range(len(self.categories))
        names = [self.categories[0], None] if self.kind == ONE_HOT else self.categories
        return tuple(
            c for c, v in zip(names, values) if (v <= threshold if op == "<=" else v < threshold)
        )


def _json_value(value):
    """A category as plain JSON: numpy scalars as Python ones, NaN as null."""
    value = value.item() if isinstance(value, np.generic) else value
    return None if isinstance(value, float) and np.isnan(value) else value


@dataclass(frozen=True)
class ColumnEncoding:
    """One original input column and the encoded columns that stand for it.

    Attributes
    ----------
    column : str
        The original input column.
    kind : {"numeric", "onehot", "ordinal", "native_categorical"}
    encoded : tuple of str
        The encoded columns (the ensemble's features), in their order.
    categories : tuple
        Categorical kinds: the categories in the encoded columns' order (one-hot: one
        per column; ordinal: code order); numeric: empty.
    scaler : tuple
        ``(min_, scale_)`` of a numeric column behind a ``MinMaxScaler`` (``encoded =
        raw * scale_ + min_``); empty otherwise.
    """

    column: str
    kind: str
    encoded: tuple
    categories: tuple = ()
    scaler: tuple = ()

    def to_json(self) -> dict:
        """``{column, kind, encoded, categories}`` (``provenance.encoding``' items), with
        ``min`` and ``scale`` for a scaled numeric column."""
        record = {
            "column": self.column,
            "kind": self.kind,
            "encoded": list(self.encoded),
            "categories": [_json_value(c) for c in self.categories],
        }
        if self.scaler:
            record.update(min=self.scaler[0], scale=self.scaler[1])
        return record

    @classmethod
    def from_json(cls, record: dict) -> ColumnEncoding:
        """The inverse of :meth:`to_json`."""
        return cls(
            str(record["column"]),
            str(record["kind"]),
            tuple(record["encoded"]),
            tuple(record.get("categories") or ()),
            (float(record["min"]), float(record["scale"])) if "scale" in record else (),
        )


def original_features(described, encoded_names) -> tuple:
    """The original columns of ``encoded_names`` (features of a tree), each once, in the
    order first named, from an encoding's :meth:`Encoding.described` (or its JSON)."""
    owner = {}
    for item in described:
        item = item if isinstance(item, ColumnEncoding) else ColumnEncoding.from_json(item)
        owner.update(dict.fromkeys(item.encoded, item.column))
    return tuple(dict.fromkeys(owner.get(str(n), str(n)) for n in encoded_names))


def _set(categories) -> str:
    return "{" + ", ".join(str(c) for c in categories) + "}"


@dataclass(frozen=True)
class Encoding:
    """The encoded columns of a fitted ``ColumnTransformer``, in its output order.

    Attributes
    ----------
    columns : tuple of EncodedColumn
    inputs : tuple of str
        The transformer's input columns (``feature_names_in_``), in order.
    seen : dict
        Categorical input column -> tuple of the categories seen in training.
    native : bool
        The one-hot columns are a model's native categorical columns
        (:class:`~governance.native_categories.NativeCategories`), not a pipeline's.
    """

    columns: tuple
    inputs: tuple
    seen: dict
    native: bool = False

    @property
    def names(self) -> tuple:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> EncodedColumn:
        """The encoded column called ``name``."""
        for encoded in self.columns:
            if encoded.name == name:
                return encoded
        raise UnknownNameError(
            f"{name!r} is not an encoded column ({', '.join(self.names[:5])} ...)"
        )

    def original(self, name: str) -> str:
        """The original column an encoded column stands for."""
        return self.column(name).column

    def described(self) -> tuple:
        """One :class:`ColumnEncoding` per original column the encoded columns come
        from (per column and kind, should a column be encoded twice), in input order."""
        groups = {}
        for encoded in self.columns:
            groups.setdefault((encoded.column, encoded.kind), []).append(encoded)
        order = {column: k for k, column in enumerate(self.inputs)}
        described = []
        for (column, kind), group in sorted(groups.items(), key=lambda g: order[g[0][0]]):
            recorded = RECORDED_KINDS[kind]
            if kind == ONE_HOT and self.native:
                recorded = NATIVE_CATEGORICAL
            categories = sum((c.categories for c in group), ())
            names = tuple(c.name for c in group)
            scaler = (group[0].min_, group[0].scale_)
            scaler = () if scaler == (0.0, 1.0) else scaler
            described.append(ColumnEncoding(column, recorded, names, categories, scaler))
        return tuple(described)

    @classmethod
    def from_described(cls, described) -> Encoding:
        """The encoding :meth:`described` (or its JSON, ``provenance.encoding``) gave."""
        items = [
            c if isinstance(c, ColumnEncoding) else ColumnEncoding.from_json(c) for c in described
        ]
        kinds = {value: kind for kind, value in RECORDED_KINDS.items()}
        kinds[NATIVE_CATEGORICAL] = ONE_HOT
        columns = []
        for item in items:
            kind = kinds[item.kind]
            if kind == ONE_HOT:
                pairs = zip(item.encoded, item.categories, strict=True)
                columns += [EncodedColumn(n, item.column, ONE_HOT, (c,)) for n, c in pairs]
            else:
                categories = item.categories if kind == ORDINAL else ()
                columns += [
                    EncodedColumn(n, item.column, kind, categories, *item.scaler)
                    for n in item.encoded
                ]
        seen = {i.column: tuple(i.categories) for i in items if kinds[i.kind] != NUMERIC}
        native = any(i.kind == NATIVE_CATEGORICAL for i in items)
        return cls(tuple(columns), tuple(i.column for i in items), seen, native)

    def original_count(self, used) -> int:
        """Original columns the encoded columns at positions ``used`` come from."""
        return len({self.columns[int(j)].column for j in used})

    def original_values(self, row) -> dict:
        """One row of encoded values (raw units: :meth:`raw_values`) as original column ->
        its value: a category (None when a one-hot group has no 1, a missing or unseen
        category; an ordinal code with no category), or the number (NaN when missing)."""
        values = {}
        for encoded, value in zip(self.columns, np.asarray(row, dtype=np.float64), strict=True):
            if encoded.kind == NUMERIC:
                values[encoded.column] = float(value)
            elif encoded.kind == ONE_HOT:
                values.setdefault(encoded.column, None)
                if value == 1.0:
                    values[encoded.column] = encoded.categories[0]
            else:
                code = int(value) if np.isfinite(value) and float(value).is_integer() else -1
                inside = 0 <= code < len(encoded.categories)
                values[encoded.column] = encoded.categories[code] if inside else None
        return values

    def term(self, name: str) -> str:
        """An encoded column as a term of an oblique split: ``[purpose = car]`` (1 when
        the row's category is ``car``), ``purpose (code)``, or the numeric column."""
        encoded = self.column(name)
        if encoded.kind == ONE_HOT:
            return f"[{encoded.column} = {encoded.categories[0]}]"
        if encoded.kind == ORDINAL:
            return f"{encoded.column} (code)"
        return encoded.column

    def condition(self, name: str, threshold: float, op: str = "<=") -> str:
        """``value <op> threshold`` on encoded column ``name`` in original terms (a numeric
        threshold in raw units, as :meth:`raw_terms` gives); a split that keeps every
        category on one side stays a comparison of its :meth:`term`."""
        from miret_governance.governance.miret.tree.conditions import format_number

        encoded = self.column(name)
        if encoded.kind == NUMERIC:
            return f"{encoded.column} {op} {format_number(threshold)}"
        meets = encoded.meets(threshold, op)
        if encoded.kind == ONE_HOT and len(meets) == 1:
            inside = meets[0] is not None
            return f"{encoded.column} {'in' if inside else 'not in'} {_set(encoded.categories)}"
        if encoded.kind == ORDINAL and 0 < len(meets) < len(encoded.categories):
            return f"{encoded.column} in {_set(meets)}"
        return f"{self.term(name)} {op} {format_number(threshold)}"

    def raw_terms(self, coef, intercept: float) -> tuple:
        """One split's coefficients over the encoded columns and its intercept, with
        every scaled numeric column in raw units (``w·(x·scale_ + min_)``)."""
        scale = np.array([c.scale_ for c in self.columns])
        shift = np.array([c.min_ for c in self.columns])
        coef = np.asarray(coef, dtype=np.float64)
        return coef * scale, float(intercept + coef @ shift)

    def raw_values(self, row) -> np.ndarray:
        """Encoded values with every scaled numeric column back in raw units (the units
        of :meth:`raw_terms`)."""
        return self.raw_values_of(self.columns, row)

    def numeric_range(self, scaler):
        """A MinMaxScaler over the original numeric columns, in raw units, from one
        fitted over the encoded columns (a surrogate's ``input_scaler_`` or a recorded
        input range); one already over the original columns is returned as it is."""
        from sklearn.preprocessing import MinMaxScaler

        names = [str(n) for n in getattr(scaler, "feature_names_in_", ())]
        numeric = [c for c in self.columns if c.kind == NUMERIC]
        if not numeric or not {c.name for c in numeric} <= set(names):
            return scaler
        index = [names.index(c.name) for c in numeric]
        low = self.raw_values_of(numeric, np.asarray(scaler.data_min_)[index])
        high = self.raw_values_of(numeric, np.asarray(scaler.data_max_)[index])
        bounds = pd.DataFrame([low, high], columns=[c.column for c in numeric])
        return MinMaxScaler().fit(bounds)

    @staticmethod
    def raw_values_of(columns, values) -> np.ndarray:
        """Values of the encoded ``columns`` in raw units."""
        scale = np.array([c.scale_ for c in columns])
        shift = np.array([c.min_ for c in columns])
        return (np.asarray(values, dtype=np.float64) - shift) / scale

    def raw_range(self, low, high) -> tuple:
        """Encoded data ranges in the units of :meth:`raw_terms`."""
        return self.raw_values(low), self.raw_values(high)

    def unseen(self, frame: pd.DataFrame) -> dict:
        """Categorical column -> sorted values of ``frame`` not seen in training (nulls
        are left to the null checks)."""
        found = {}
        for column, seen in self.seen.items():
            if column not in frame.columns:
                continue
            other = sorted(set(frame[column].dropna().unique().tolist()) - set(seen), key=str)
            if other:
                found[column] = other
        return found

    def encode(self, transformer, frame: pd.DataFrame) -> pd.DataFrame:
        """``transformer.transform(frame)`` as a dense frame with the encoded names.

        Raises
        ------
        EncodingError
            A categorical column holds a category not seen in training: it is named,
            never mapped the way the encoder maps unknown values.
        """
        unseen = self.unseen(frame)
        if unseen:
            shown = "; ".join(
                f"{column}: {', '.join(map(str, values[:5]))} (seen in training: "
                f"{', '.join(map(str, self.seen[column]))})"
                for column, values in unseen.items()
            )
            raise EncodingError(f"categories not seen in training: {shown}; {UNSEEN_ADVICE}")
        encoded = transformer.transform(frame[list(self.inputs)])
        if hasattr(encoded, "toarray"):
            encoded = encoded.toarray()
        return pd.DataFrame(
            np.asarray(encoded, dtype=np.float64), columns=list(self.names), index=frame.index
        )


def _categories(encoder, k: int) -> tuple:
    return tuple(encoder.categories_[k].tolist())


def _columns_of(name, transformer, inputs) -> list:
    """The encoded columns one fitted transformer of the ColumnTransformer makes."""
    from sklearn.preprocessing import (
        FunctionTransformer,
        MinMaxScaler,
        OneHotEncoder,
        OrdinalEncoder,
    )

    if isinstance(transformer, OneHotEncoder):
        if transformer.drop_idx_ is not None or transformer._infrequent_enabled:
            raise EncodingError(
                f"the OneHotEncoder {name!r} drops or groups categories (drop=, min_frequency="
                ", max_categories=); explain supports one column per category: re-fit it "
                "without those options"
            )
        return [
            (column, ONE_HOT, (category,), 0.0, 1.0)
            for k, column in enumerate(inputs)
            for category in _categories(transformer, k)
        ]
    if isinstance(transformer, OrdinalEncoder):
        return [(c, ORDINAL, _categories(transformer, k), 0.0, 1.0) for k, c in enumerate(inputs)]
    if isinstance(transformer, MinMaxScaler):
        return [
            (c, NUMERIC, (), float(transformer.min_[k]), float(transformer.scale_[k]))
            for k, c in enumerate(inputs)
        ]
    passthrough = isinstance(transformer, FunctionTransformer) and transformer.func is None
    if transformer == "passthrough" or passthrough:
        return [(c, NUMERIC, (), 0.0, 1.0) for c in inputs]
    raise EncodingError(
        f"the ColumnTransformer step {name!r} is a {type(transformer).__name__}; explain "
        "maps back only OneHotEncoder, OrdinalEncoder, MinMaxScaler and passthrough columns"
    )


def encoding_of(preprocessor) -> Encoding | None:
    """The :class:`Encoding` of a fitted ``ColumnTransformer`` (alone or as the only step
    of a Pipeline) or of a model's native categories
    (:class:`~governance.native_categories.NativeCategories`), or None for any other
    preprocessor.

    Raises
    ------
    EncodingError
        A ColumnTransformer with a transformer that cannot be mapped back, or fitted on
        an array without column names.
    """
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import Pipeline

    native = getattr(preprocessor, "encoding", None)  # NativeCategories carries its own
    if isinstance(native, Encoding):
        return native
    if isinstance(preprocessor, Pipeline) and len(preprocessor.steps) == 1:
        preprocessor = preprocessor.steps[0][1]
    if not isinstance(preprocessor, ColumnTransformer):
        return None
    inputs = getattr(preprocessor, "feature_names_in_", None)
    if inputs is None:
        raise EncodingError(
            "the ColumnTransformer was fitted on an array without column names; fit the "
            "pipeline on a DataFrame so the rules can name the original columns"
        )
    inputs = [str(c) for c in inputs]
    indices = preprocessor._transformer_to_input_indices
    described = []
    for name, transformer, _ in preprocessor.transformers_:
        if isinstance(transformer, str) and transformer == "drop":
            continue
        used = [inputs[i] for i in indices.get(name, [])]
        if used:
            described += _columns_of(name, transformer, used)
    names = [str(n) for n in preprocessor.get_feature_names_out()]
    if len(names) != len(described):
        raise EncodingError(
            f"the ColumnTransformer makes {len(names)} columns, {len(described)} were mapped "
            "back to its inputs"
        )
    columns = tuple(
        EncodedColumn(name, column, kind, categories, low, scale)
        for name, (column, kind, categories, low, scale) in zip(names, described, strict=True)
    )
    seen = {}
    for encoded in columns:
        if encoded.kind == ORDINAL:
            seen[encoded.column] = encoded.categories
        elif encoded.kind == ONE_HOT:
            seen[encoded.column] = seen.get(encoded.column, ()) + encoded.categories
    return Encoding(columns, tuple(inputs), seen)


def aggregate(frame: pd.DataFrame, encoding: Encoding) -> pd.DataFrame:
    """Rows named by encoded columns summed per original column (a one-hot group is one
    row), in the order the original columns first appear."""
    originals = [encoding.original(str(name)) for name in frame.index]
    summed = frame.groupby(originals, sort=False).sum()
    summed.index.name = frame.index.name
    return summed


def encoded_view(ensemble):
    """The view of ``ensemble`` that takes the encoded columns (no preprocessor), carrying
    its :class:`Encoding`; ``ensemble`` itself when it does not encode its inputs."""
    import dataclasses

    encoding = encoding_of(ensemble.preprocessor)
    if encoding is None:
        return ensemble
    return dataclasses.replace(ensemble, preprocessor=None, encoding=encoding)


def surrogate_display(surrogate, class_names=None, encoding=None):
    """``surrogate.display(class_names)``, its conditions in original columns and
    categories when the surrogate was fitted on ``encoding``'s columns."""
    if encoding is None:
        return surrogate.display(class_names)
    from miret_governance.governance.miret.tree.display import display_from_counts

    return display_from_counts(
        surrogate.tree_,
        surrogate.leaf_counts_,
        scaler=surrogate.input_scaler_,
        class_names=class_names,
        encoding=encoding,
    )


def surrogate_rules(surrogate, class_names=None, encoding=None) -> str:
    """``surrogate.rules(class_names)`` in original columns and categories
    (:func:`surrogate_display`)."""
    from miret_governance.governance.miret.tree.display import rules_text

    return rules_text(surrogate_display(surrogate, class_names, encoding))


def recorded_encoding(provenance: dict) -> Encoding | None:
    """The :class:`Encoding` a surrogate's evidence records (``provenance.encoding``), or
    None for evidence of a model without one (or written before it was recorded).

    Raises
    ------
    EncodingError
        A recorded encoding that is not a list of :meth:`ColumnEncoding.to_json` items.
    """
    described = provenance.get("encoding")
    if described is None:
        return None
    try:
        return Encoding.from_described(described)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise EncodingError(
            f"the evidence's recorded encoding cannot be read ({error!r}); explain the "
            "version again with --force"
        ) from None
