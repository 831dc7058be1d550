"""What the report's "Try an applicant" panel needs to follow one row in the browser.

The panel (``templates/applicant.js``, plain JavaScript inside the signed report) takes
one row in the ORIGINAL input columns and gives what ``govern explain-row`` gives for it:
the surrogate's path in raw units, its class, and, when the ensemble is small enough to
embed (at most :data:`EMBED_MAX_NODES` nodes over all its trees), the ensemble's class
and probabilities and whether both agree. Everything it needs is one JSON document,
built here from the surrogate, its input scaler, the encoding of the pipeline's columns
and the :class:`~governance.ensembles.ensemble.Ensemble` view:

- ``encoded``: how an original row becomes the tree's features (one-hot indicators,
  ordinal codes, a numeric column behind a ``MinMaxScaler``), or null when the features
  are the input columns themselves. :func:`_encoded_features` is the one adapter over
  :mod:`governance.ensembles.encoding`.
- ``surrogate``: every branch node's normalized hyperplane, its missing-value side
  (:mod:`governance.miret.tree.missing`), and the words of its condition and negation
  as :func:`governance.miret.tree.conditions.split_table` writes them, so the script
  only routes and fills in the row's numbers (formatted as
  :func:`~governance.miret.tree.conditions.format_number` does).
- ``ensemble``: the padded node arrays of :func:`governance.ensembles.routing.padded_nodes`
  (thresholds already in the library's precision, native categorical nodes as their
  answer tables), the aggregation (average or margin with its base margin and link) and
  each tree's class, so the script predicts as :meth:`Ensemble.exact_proba` does.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from miret_governance.governance.ensembles.encoding import ONE_HOT, ORDINAL
from miret_governance.governance.ensembles.native_categories import category_label
from miret_governance.governance.ensembles.routing import padded_nodes
from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.miret.tree.conditions import (
    negation,
    raw_hyperplanes,
    split_table,
)

EMBED_MAX_NODES = 20_000
"""Most nodes, over all its trees, of an ensemble the report embeds (about 1 MB of JSON);
a larger one is left out and the panel says so."""
SCRIPT_ID = "applicant-model"
"""The id of the report's ``<script type="application/json">`` block."""


class NotEmbedded(GovernanceError):
    """Why the ensemble is not in the page: caught by :func:`applicant_model`, which shows
    its message in the panel. Exit code 2 were it ever to escape."""


@dataclass(frozen=True)
class Column:
    """One original input column: ``kind`` "number" or "category" (its categories as
    the rules write them, in the encoder's order); ``blank`` says what a blank category
    is: "missing" (a model's native categories: no indicator set, as its library reads a
    missing value) or "refused" (a pipeline's encoder, which ``govern explain-row`` asks
    for a category)."""

    name: str
    kind: str
    categories: tuple = ()
    blank: str = ""


@dataclass(frozen=True)
class EncodedFeature:
    """One feature of the tree from the original columns: ``kind`` "numeric" (the
    column's value ``x * scale + min``), "one-hot" (1 when the column is ``categories[0]``)
    or "ordinal" (the position of the column's category in ``categories``)."""

    column: str
    kind: str
    categories: tuple = ()
    min: float = 0.0
    scale: float = 1.0


@dataclass(frozen=True)
class Node:
    """One branch node of the surrogate: ``terms`` (feature index, normalized weight),
    ``raw_terms`` (feature index, raw-unit weight: the row's value of the condition's
    left side), ``condition`` and ``negation`` (None for a node without coefficients,
    which is no step of a path), ``yes`` ("left" or "right") and ``missing_left``
    (None for a tree without a rule for missing values)."""

    terms: tuple
    intercept: float
    raw_terms: tuple
    condition: str | None
    negation: str | None
    yes: str
    missing_left: bool | None


@dataclass(frozen=True)
class ApplicantModel:
    """The panel's JSON document (:meth:`to_json`): the original ``columns``, how they
    become the tree's ``features`` (``encoded``, None when they are the features), the
    surrogate's input ``scaler`` (``min``, ``scale``, ``clip``), branch ``nodes``
    breadth-first, each leaf's class index and the ``class_names``, and the ensemble
    (None when it is not embedded; ``ensemble_note`` says which, and why)."""

    columns: tuple
    encoded: tuple | None
    features: tuple
    scaler: dict | None
    nodes: tuple
    leaf_class: tuple
    class_names: tuple
    ensemble: EmbeddedEnsemble | None
    ensemble_note: str

    def to_json(self) -> str:
        """Compact JSON, safe inside a ``<script>`` element (``<``, ``>`` and ``&``
        escaped as ``\\u`` sequences, which JSON reads back as themselves)."""
        text = json.dumps(asdict(self), separators=(",", ":"), allow_nan=False)
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _scaler(scaler) -> dict | None:
    if scaler is None:
        return None
    return {
        "min": [float(v) for v in scaler.min_],
        "scale": [float(v) for v in scaler.scale_],
        "clip": bool(getattr(scaler, "clip", False)),
    }


def _encoded_features(encoding) -> tuple:
    """The adapter over :class:`governance.ensembles.encoding.Encoding` (the only code
    here that reads its fields)."""
    return tuple(
        EncodedFeature(
            c.column,
            c.kind,
            tuple(category_label(v) for v in c.categories),
            float(c.min_),
            float(c.scale_),
        )
        for c in encoding.columns
    )


def _columns(feature_names, encoded, blank: str) -> tuple:
    if encoded is None:
        return tuple(Column(str(name), "number") for name in feature_names)
    columns = {}
    for feature in encoded:
        if feature.kind == ONE_HOT:
            seen = columns.get(feature.column, Column(feature.column, "category"))
            columns[feature.column] = Column(
                feature.column, "category", seen.categories + feature.categories, blank
            )
        elif feature.kind == ORDINAL:
            columns[feature.column] = Column(feature.column, "category", feature.categories, blank)
        else:
            columns[feature.column] = Column(feature.column, "number")
    return tuple(columns.values())


def _nodes(tree, scaler, encoding) -> tuple:
    splits = split_table(tree, scaler=scaler, encoding=encoding)
    coef = np.asarray(tree.coef)
    raw_coef = raw_hyperplanes(tree, scaler)[0]
    if encoding is not None:
        raw_coef = np.array([encoding.raw_terms(row, 0.0)[0] for row in raw_coef])
    missing = tree.missing_left
    nodes = []
    for t, split in enumerate(splits):
        used = np.flatnonzero(coef[t])
        condition = split["condition"]
        nodes.append(
            Node(
                terms=tuple((int(j), float(coef[t, j])) for j in used),
                intercept=float(tree.intercept[t]),
                raw_terms=tuple((int(j), float(raw_coef[t, j])) for j in used),
                condition=condition,
                negation=None if condition is None else negation(condition),
                yes=split["yes"],
                missing_left=None if missing is None else bool(missing[t]),
            )
        )
    return tuple(nodes)


def _ensemble_input(ensemble, encoding) -> dict | None:
    """The ensemble's own preprocessing of the tree's features: none (its inputs are the
    encoded or raw features) or a ``MinMaxScaler``; anything else is not reproduced."""
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler

    step = ensemble.preprocessor
    if encoding is not None or step is None:
        return None
    if isinstance(step, Pipeline) and len(step.steps) == 1:
        step = step.steps[0][1]
    if isinstance(step, MinMaxScaler):
        return _scaler(step)
    raise NotEmbedded(
        f"the pipeline's {type(step).__name__} before the ensemble is not reproduced in the page"
    )


@dataclass(frozen=True)
class CategoricalNode:
    """A native categorical split (:class:`governance.ensembles.categories.CategoryTable`):
    ``answer`` per code (0 right, 1 left, 2 missing; the last answers every higher code),
    where a missing value goes, and whether ``trunc(x) < 0`` (else ``x < 0``) is negative."""

    answer: tuple
    missing_left: bool
    truncates: bool


@dataclass(frozen=True)
class EmbeddedTree:
    """One tree's node arrays as :func:`~governance.ensembles.routing.padded_nodes` pads
    them (a leaf's children are itself, its feature -1); ``categorical``: node (as text)
    -> :class:`CategoricalNode`."""

    feature: tuple
    threshold: tuple
    left: tuple
    right: tuple
    missing_left: tuple
    value: tuple
    categorical: dict


@dataclass(frozen=True)
class EmbeddedEnsemble:
    """The ensemble as the panel predicts with it (:meth:`Ensemble.exact_proba`):
    ``input`` its own MinMaxScaler (None: it takes the tree's features), ``float32``
    whether inputs are rounded to single precision, ``groups`` the one-hot groups of
    native categorical columns, ``class_names`` in the order of its classes."""

    n_nodes: int
    aggregation: str
    base_margin: object
    left_if: str
    float32: bool
    tree_class: tuple
    groups: tuple
    input: dict | None
    class_names: tuple
    trees: tuple


def _json_thresholds(thresholds) -> tuple:
    """Thresholds JSON can hold: NaN (a categorical node's, never compared) as 0, an
    infinite one as the largest finite double (the same side for every finite value)."""
    finite = np.nan_to_num(thresholds, nan=0.0, posinf=np.finfo(np.float64).max)
    return tuple(float(v) for v in finite)


def embedded_ensemble(ensemble, encoding, class_names) -> EmbeddedEnsemble:
    """The ensemble's trees and how they are combined, as the panel routes them.

    Raises
    ------
    NotEmbedded
        More than :data:`EMBED_MAX_NODES` nodes, or a preprocessing step the page does
        not reproduce.
    """
    n_nodes = sum(tree.n_nodes for tree in ensemble.trees)
    if n_nodes > EMBED_MAX_NODES:
        raise NotEmbedded(
            f"the ensemble has {n_nodes:,} nodes, more than the {EMBED_MAX_NODES:,} a report "
            "embeds; use govern explain-row for its answer"
        )
    preprocess = _ensemble_input(ensemble, encoding)
    padded = padded_nodes(ensemble.trees, ensemble.left_if)
    table = padded.categories
    trees = []
    for e, tree in enumerate(ensemble.trees):
        n = tree.n_nodes
        categorical = {}
        if table is not None:
            for node in np.flatnonzero(table.row[e, :n] >= 0):
                row = int(table.row[e, node])
                categorical[str(int(node))] = CategoricalNode(
                    tuple(int(a) for a in table.answer[row]),
                    bool(table.missing_left[row]),
                    bool(table.truncates_negative[row]),
                )
        trees.append(
            EmbeddedTree(
                feature=tuple(int(f) for f in padded.feature[e, :n]),
                threshold=_json_thresholds(padded.threshold[e, :n]),
                left=tuple(int(v) for v in padded.left[e, :n]),
                right=tuple(int(v) for v in padded.right[e, :n]),
                missing_left=tuple(bool(v) for v in padded.missing_left[e, :n]),
                value=tuple(padded.value[e, :n].tolist()),
                categorical=categorical,
            )
        )
    margin = ensemble.base_margin
    return EmbeddedEnsemble(
        n_nodes=n_nodes,
        aggregation=ensemble.aggregation,
        base_margin=margin.tolist() if isinstance(margin, np.ndarray) else float(margin),
        left_if=ensemble.left_if,
        float32=ensemble.input_precision == "float32",
        tree_class=tuple(int(c) for c in ensemble.tree_class),
        groups=tuple(tuple(group) for group in ensemble.category_groups),
        input=preprocess,
        class_names=tuple(class_names),
        trees=tuple(trees),
    )


def applicant_model(surrogate, ensemble, class_names=None) -> ApplicantModel:
    """The panel's document for a fitted surrogate of ``ensemble``.

    Parameters
    ----------
    surrogate : MIRETClassifier
        Fitted; its ``tree_`` and ``input_scaler_`` (raw units to the tree's space).
    ensemble : governance.ensembles.ensemble.Ensemble
        The view the surrogate explains (the encoded view of a pipeline whose
        ``ColumnTransformer`` encodes categories, or a view with native categories).
    class_names : sequence of str, optional
        Names of the classes (default: the labels as text).
    """
    from miret_governance.governance.ensembles.encoding import encoding_of
    from miret_governance.governance.miret.tree.paths import class_names_of

    tree = getattr(surrogate, "tree_", surrogate)
    scaler = getattr(surrogate, "input_scaler_", None)
    encoding = ensemble.encoding or encoding_of(ensemble.preprocessor)
    encoded = None if encoding is None else _encoded_features(encoding)
    names = class_names_of(tree, class_names)
    by_label = dict(zip(tree.classes.tolist(), names, strict=True))
    try:
        document = embedded_ensemble(
            ensemble, encoding, [by_label[c] for c in ensemble.classes.tolist()]
        )
        note = (
            f"The ensemble's {document.n_nodes:,} nodes are embedded (at most "
            f"{EMBED_MAX_NODES:,}): its answer is computed here as govern explain-row does."
        )
    except NotEmbedded as why:
        document, note = None, f"The ensemble's answer is not shown: {why}."
    return ApplicantModel(
        columns=_columns(
            tree.feature_names, encoded, "missing" if ensemble.category_groups else "refused"
        ),
        encoded=encoded,
        features=tuple(tree.feature_names),
        scaler=_scaler(scaler),
        nodes=_nodes(tree, scaler, encoding),
        leaf_class=tuple(int(c) for c in tree.leaf_class),
        class_names=names,
        ensemble=document,
        ensemble_note=note,
    )
