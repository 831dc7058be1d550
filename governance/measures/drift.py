"""What changed between two explanations of a model, and the policy gates on it.

An :class:`Explanation` is what ``govern explain`` stores for one ensemble version: the
VITE level frequencies of its ensemble (:func:`governance.vite.level_frequency` with
``denominator="splits"``: at each level, the share of the level's splits made on each
feature), the features its surrogate uses, its rules text
(:func:`governance.miret.display.rules_text`) and, for cross-fidelity, the surrogate and
the ensemble themselves. :func:`compare` reports what changed from version A (``from``,
e.g. the champion) to version B (``to``, the candidate):

- **frequency changes** ``f^B_{j,d} - f^A_{j,d}`` per feature ``j`` and level ``d`` (a
  feature or level one side lacks counts 0), largest absolute change first;
- **explanation drift**, one distance in ``[0, 1]``: the mean over levels of the total
  variation distance between the two levels' split distributions,
  ``TV_d = 1/2 sum_j |f^A_{j,d} - f^B_{j,d}|``. A level where only one ensemble splits
  counts 1; a level where neither splits is left out. 0: the same share of splits on
  every feature at every level; 1: no level splits on a feature in common;
- **feature overlap**: the Jaccard index ``|U_A & U_B| / |U_A | U_B|`` of the features
  the two surrogates use (1 when neither uses any);
- **rules side by side**, line by line, and what changed in them
  (:mod:`governance.measures.rule_changes`);
- **cross-fidelity** on rows the caller gives: the share of rows where A's surrogate
  agrees with B's ensemble, and where B's surrogate agrees with A's ensemble (labels
  compared as they are, for any number of classes the two versions share). The
  figure a policy gates on is the smaller of the two: each explanation must still
  describe the other version's model. The rows are in raw units; for a version behind
  a pipeline's ``ColumnTransformer``, its original columns (a category not seen in
  training is refused by name). A missing value (NaN) follows each model's own rule,
  refused only for a surrogate without one (format version 1).

A policy's ``max_explanation_drift`` and ``min_cross_fidelity``
(:data:`governance.policy.DRIFT_GATES`) are decided by :func:`drift_gates`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import zip_longest

import numpy as np
import pandas as pd

from miret_governance.governance.ensembles.arrays import feature_matrix
from miret_governance.governance.ensembles.encoding import encoding_of
from miret_governance.governance.errors import GovernanceError
from miret_governance.governance.measures.rule_changes import RuleChanges, rule_changes
from miret_governance.governance.miret.tree.missing import check_missing_rule
from miret_governance.governance.miret.tree.paths import RowsError, encoded_rows, feature_rows
from miret_governance.governance.trust.gates import GateResult, readable_pair
from miret_governance.governance.trust.policy import DRIFT_GATES

CROSS_FIDELITY = DRIFT_GATES["min_cross_fidelity"].metric
"""The drift figure read from :class:`CrossFidelity` (the other, from the distance)."""
SUM_TOLERANCE = 1e-6
"""How far a level's frequencies may sum from 1 (or 0) and still be split shares."""


class DriftError(GovernanceError, ValueError):
    """Two explanations that cannot be compared: frequencies that are not split shares,
    rows without a version's features, or versions with different classes. Exit code 2."""


@dataclass(frozen=True)
class Explanation:
    """One version's explanation, as :func:`compare` reads it.

    Attributes
    ----------
    name : str
        How reports name the version, e.g. ``models:/credit-rf/4``.
    level_frequency : DataFrame
        :func:`governance.vite.level_frequency` (``"splits"``): index feature names,
        columns levels ``0..D-1``.
    features : tuple of str
        The features the surrogate uses.
    rules : str
        The surrogate's rules text.
    surrogate : MiretSurrogate or SurrogateTree, optional
        For cross-fidelity: a MiretSurrogate takes raw rows (its own input scaler); a
        bare SurrogateTree takes its own ensemble's transformed rows.
    ensemble : governance.ensemble.Ensemble, optional
        The version's ensemble, for cross-fidelity.
    """

    name: str
    level_frequency: pd.DataFrame
    features: tuple
    rules: str
    surrogate: object = None
    ensemble: object = None


@dataclass(frozen=True)
class CrossFidelity:
    """Agreement of each version's surrogate with the other version's ensemble.

    Attributes
    ----------
    rows : int
    from_on_to : int
        Rows where the ``from`` surrogate agrees with the ``to`` ensemble.
    to_on_from : int
        Rows where the ``to`` surrogate agrees with the ``from`` ensemble.
    """

    rows: int
    from_on_to: int
    to_on_from: int

    @property
    def value(self) -> float:
        """The smaller share of the two: what ``min_cross_fidelity`` gates on."""
        return min(self.from_on_to, self.to_on_from) / self.rows

    def to_json(self) -> dict:
        return {
            "rows": self.rows,
            "from_surrogate_on_to_ensemble": self.from_on_to / self.rows,
            "to_surrogate_on_from_ensemble": self.to_on_from / self.rows,
            "value": self.value,
        }


@dataclass(frozen=True)
class Drift:
    """What :func:`compare` found (the module docstring defines each figure).

    Attributes
    ----------
    source, target : str
        Names of the ``from`` and ``to`` versions.
    distance : float
        Explanation drift in ``[0, 1]``.
    changes : DataFrame
        Columns ``feature``, ``level``, ``from``, ``to``, ``change``; largest absolute
        change first, rows where both frequencies are 0 left out.
    shared, only_from, only_to : tuple of str
        Features both surrogates use, and those only one uses.
    overlap : float
        Jaccard index of the surrogates' features.
    rules : list of (str, str)
        The two rules texts line by line (``""`` where one has fewer lines).
    cross_fidelity : CrossFidelity or None
        None when no rows were given.
    """

    source: str
    target: str
    distance: float
    changes: pd.DataFrame
    shared: tuple
    only_from: tuple
    only_to: tuple
    overlap: float
    rules: list
    cross_fidelity: CrossFidelity | None = None

    def rule_changes(self) -> RuleChanges:
        """What changed in the rules and the features used
        (:func:`governance.measures.rule_changes.rule_changes`)."""
        return rule_changes(
            "\n".join(a for a, _ in self.rules),
            "\n".join(b for _, b in self.rules),
            self.shared + self.only_from,
            self.shared + self.only_to,
        )

    def to_json(self) -> dict:
        """A JSON-serializable dict (changes as records)."""
        return {
            "from": self.source,
            "to": self.target,
            "distance": self.distance,
            "changes": self.changes.to_dict(orient="records"),
            "features": {
                "shared": list(self.shared),
                "only_from": list(self.only_from),
                "only_to": list(self.only_to),
                "overlap": self.overlap,
            },
            "rules": {
                "from": "\n".join(a for a, _ in self.rules).rstrip("\n"),
                "to": "\n".join(b for _, b in self.rules).rstrip("\n"),
            },
            "rule_changes": self.rule_changes().to_json(),
            "cross_fidelity": None
            if self.cross_fidelity is None
            else self.cross_fidelity.to_json(),
        }


def _checked_frequency(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    """``frame`` as float shares whose every level sums to 1 or 0, or DriftError."""
    values = frame.to_numpy(dtype=np.float64)
    sums = values.sum(axis=0)
    bad = ~np.isfinite(values).all() or (values < 0).any() or (values > 1).any()
    off = [int(d) for d, s in zip(frame.columns, sums) if min(abs(s), abs(s - 1)) > SUM_TOLERANCE]
    if bad or off:
        raise DriftError(
            f"the VITE level frequencies of {name} are not split shares (each level's "
            f"values in [0, 1] summing to 1, or 0 where no tree splits; levels {off} do "
            "not): give governance.vite.level_frequency(ensemble) with denominator='splits'"
        )
    return frame.astype(np.float64)


def _aligned(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both frames over the union of features (``a``'s order, then ``b``'s new ones) and
    levels ``0..max(D_a, D_b)-1``, missing entries 0."""
    features = list(a.index) + [f for f in b.index if f not in set(a.index)]
    levels = range(max(len(a.columns), len(b.columns)))
    return (
        a.reindex(index=features, columns=levels, fill_value=0.0),
        b.reindex(index=features, columns=levels, fill_value=0.0),
    )


def explanation_distance(a: pd.DataFrame, b: pd.DataFrame) -> float:
    """Explanation drift of two level-frequency frames (module docstring), in ``[0, 1]``.

    Examples
    --------
    >>> a = pd.DataFrame({0: [1.0, 0.0], 1: [0.5, 0.5]}, index=["x", "y"])
    >>> b = pd.DataFrame({0: [0.5, 0.5], 1: [0.5, 0.5], 2: [1.0, 0.0]}, index=["x", "y"])
    >>> explanation_distance(a, b)  # levels: 0.5, 0, 1 (only b splits at level 2)
    0.5
    """
    a, b = _aligned(_checked_frequency(a, "from"), _checked_frequency(b, "to"))
    splits_a, splits_b = a.sum(axis=0) > 0.5, b.sum(axis=0) > 0.5
    tv = 0.5 * (a - b).abs().sum(axis=0)
    tv[splits_a != splits_b] = 1.0
    compared = splits_a | splits_b
    return float(tv[compared].mean()) if compared.any() else 0.0


def frequency_changes(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per feature and level, ``from``, ``to`` and ``change = to - from``; largest absolute
    change first (ties by feature order, then level), rows where both are 0 left out."""
    a, b = _aligned(_checked_frequency(a, "from"), _checked_frequency(b, "to"))
    rank = {feature: k for k, feature in enumerate(a.index)}
    table = pd.DataFrame(
        {
            "feature": np.repeat(a.index.to_numpy(dtype=object), len(a.columns)),
            "level": np.tile(np.arange(len(a.columns)), len(a.index)),
            "from": a.to_numpy().ravel(),
            "to": b.to_numpy().ravel(),
        }
    )
    table["change"] = table["to"] - table["from"]
    table = table[(table["from"] != 0) | (table["to"] != 0)]
    order = np.lexsort(
        (table["level"], table["feature"].map(rank), -table["change"].abs().round(12))
    )
    return table.iloc[order].reset_index(drop=True)


def feature_overlap(a, b) -> tuple[tuple, tuple, tuple, float]:
    """Features both use, only ``a`` uses, only ``b`` uses, and their Jaccard index."""
    a, b = tuple(dict.fromkeys(a)), tuple(dict.fromkeys(b))
    shared = tuple(f for f in a if f in b)
    union = len(a) + len(b) - len(shared)
    return (
        shared,
        tuple(f for f in a if f not in b),
        tuple(f for f in b if f not in a),
        len(shared) / union if union else 1.0,
    )


def side_by_side(a: str, b: str) -> list:
    """The lines of two rules texts as pairs (``""`` where one text is shorter)."""
    return list(zip_longest(a.splitlines(), b.splitlines(), fillvalue=""))


def _inputs(rows: pd.DataFrame, ensemble, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` as the version's surrogate takes them and as its trees take them, or
    DriftError naming what is missing or unseen.

    Behind a pipeline's ``ColumnTransformer`` the rows are its original columns
    (category strings, raw numbers) and both take the encoded columns; otherwise the
    surrogate takes the raw features and the trees their preprocessing. A missing value
    (NaN) is kept: each model routes it by its own rule.
    """
    encoding = encoding_of(ensemble.preprocessor)
    try:
        if encoding is not None:
            encoded = encoded_rows(rows, encoding, ensemble.preprocessor).to_numpy()
            return encoded, encoded
        names = [str(n) for n in ensemble.feature_names]
        if set(names) <= {str(c) for c in rows.columns}:  # named: refusals name the column
            raw = feature_rows(rows, names, "the rows").to_numpy()
        else:
            raw = feature_matrix(rows, names, allow_nan=True)
    except (RowsError, ValueError) as error:
        raise DriftError(f"the rows cannot be scored by {name}: {error}") from None
    return raw, ensemble.transform(raw)


def surrogate_labels(explanation: Explanation, rows: pd.DataFrame) -> np.ndarray:
    """The surrogate's labels of ``rows`` (its version's raw or original columns).

    Raises
    ------
    DriftError
        Rows the version cannot score (:func:`_inputs`).
    governance.miret.missing.NoMissingRuleError
        Rows with a missing value, for a surrogate of format version 1.
    """
    raw, trees = _inputs(rows, explanation.ensemble, explanation.name)
    surrogate = explanation.surrogate
    tree = getattr(surrogate, "tree_", surrogate)
    check_missing_rule(tree, trees, f"the surrogate of {explanation.name}")
    if hasattr(surrogate, "tree_"):  # a MiretSurrogate maps raw rows with its own scaler
        return surrogate.predict(raw)
    return surrogate.predict(trees)


def ensemble_labels(explanation: Explanation, rows: pd.DataFrame) -> np.ndarray:
    """The version's ensemble's labels of ``rows``."""
    return explanation.ensemble.predict(_inputs(rows, explanation.ensemble, explanation.name)[1])


def cross_fidelity(a: Explanation, b: Explanation, rows: pd.DataFrame) -> CrossFidelity:
    """Each surrogate against the other version's ensemble on ``rows`` (raw units).

    Raises
    ------
    DriftError
        No rows, rows without a version's features (or with a category its training
        did not see), or versions with other classes.
    governance.miret.missing.NoMissingRuleError
        Rows with a missing value, for a surrogate of format version 1.
    """
    if len(rows) == 0:
        raise DriftError("cross-fidelity needs at least one row; give a data file with rows")
    if set(a.ensemble.classes.tolist()) != set(b.ensemble.classes.tolist()):
        raise DriftError(
            f"{a.name} predicts {a.ensemble.classes.tolist()} but {b.name} predicts "
            f"{b.ensemble.classes.tolist()}: cross-fidelity compares labels, so both versions "
            "must predict the same classes"
        )
    return CrossFidelity(
        rows=len(rows),
        from_on_to=int(np.sum(surrogate_labels(a, rows) == ensemble_labels(b, rows))),
        to_on_from=int(np.sum(surrogate_labels(b, rows) == ensemble_labels(a, rows))),
    )


def compare(a: Explanation, b: Explanation, rows: pd.DataFrame | None = None) -> Drift:
    """What changed from explanation ``a`` to ``b`` (the module docstring defines each
    figure); cross-fidelity only with ``rows`` (both explanations then need their
    surrogate and ensemble)."""
    shared, only_a, only_b, overlap = feature_overlap(a.features, b.features)
    return Drift(
        source=a.name,
        target=b.name,
        distance=explanation_distance(a.level_frequency, b.level_frequency),
        changes=frequency_changes(a.level_frequency, b.level_frequency),
        shared=shared,
        only_from=only_a,
        only_to=only_b,
        overlap=overlap,
        rules=side_by_side(a.rules, b.rules),
        cross_fidelity=None if rows is None else cross_fidelity(a, b, rows),
    )


def drift_gates(gates: dict, drift: Drift | None, against: str) -> list:
    """The verdicts of a policy's drift gates (those of ``gates`` in ``DRIFT_GATES``).

    Parameters
    ----------
    gates : dict
        The policy's gates: name -> threshold.
    drift : Drift or None
        From the version the policy compares with (``from``) to the candidate (``to``);
        None when no version holds the alias: every drift gate passes.
    against : str
        The alias compared with, e.g. ``champion`` (named in the reasons).

    Returns
    -------
    list of GateResult
        ``max_explanation_drift`` on :attr:`Drift.distance`; ``min_cross_fidelity`` on
        :attr:`CrossFidelity.value`, failing when the drift has no cross-fidelity (no
        rows were given). A value exactly at its threshold passes.
    """
    results = []
    for name, threshold in gates.items():
        if name not in DRIFT_GATES:
            continue
        spec = DRIFT_GATES[name]
        metric = spec.metric
        if drift is None:
            results.append(
                GateResult(
                    name,
                    metric,
                    threshold,
                    None,
                    True,
                    f"no {against} yet: no version holds @{against}",
                )
            )
            continue
        if metric == CROSS_FIDELITY:
            if drift.cross_fidelity is None:
                reason = f"cross-fidelity against {drift.source} (@{against}) needs --data"
                results.append(GateResult(name, metric, threshold, None, False, reason))
                continue
            value = drift.cross_fidelity.value
        else:
            value = drift.distance
        passed = value >= threshold if spec.greater_is_better else value <= threshold
        verdict = "meets" if passed else "does not meet"
        shown, limit = readable_pair(value, threshold)
        reason = (
            f"{metric} = {shown} against {drift.source} (@{against}) {verdict} "
            f"{spec.comparison} {limit}"
        )
        results.append(GateResult(name, metric, threshold, value, passed, reason))
    return results
