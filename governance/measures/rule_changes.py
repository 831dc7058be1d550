"""What changed in the rules between two explanations, in words a reviewer checks first.

A rule is one leaf's line of :func:`governance.miret.display.rules_text` without its
share and purity (``if a <= 3 and b > 1 then yes``; ``always no``). From version A
(``from``, e.g. the champion) to version B (``to``, the candidate):

- **unchanged**: the same rule in both;
- **thresholds moved**: a rule of A and one of B with the same conditions on the same
  features, the same operators and the same class, only numbers differ (paired in order);
- **removed** / **added**: the other rules of A / of B;
- **features lost** / **gained**: used by A's surrogate only / by B's only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_STATS = re.compile(r"\s*\([^()]*of samples, purity [^()]*\)\s*$")
LIMIT = 4000
"""Largest :meth:`RuleChanges.to_json_text` (characters): rules beyond it are counted,
not listed (a run tag holds at most 8000)."""


@dataclass(frozen=True)
class RuleChanges:
    """The rules and features of two explanations compared (module docstring).

    Attributes
    ----------
    added, removed : tuple of str
    moved : tuple of (str, str)
        (rule of ``from``, the same rule of ``to`` with other thresholds).
    unchanged : int
    gained, lost : tuple of str
        Features only ``to`` uses, features only ``from`` uses.
    counts : dict, optional
        ``added``, ``removed``, ``moved`` when the lists were cut to :data:`LIMIT`.
    """

    added: tuple = ()
    removed: tuple = ()
    moved: tuple = ()
    unchanged: int = 0
    gained: tuple = ()
    lost: tuple = ()
    counts: dict | None = None

    def count(self, kind: str) -> int:
        """How many rules of ``kind`` (``added``, ``removed``, ``moved``) changed."""
        return (self.counts or {}).get(kind, len(getattr(self, kind)))

    @property
    def any(self) -> bool:
        """Whether anything changed."""
        kinds = ("added", "removed", "moved")
        return any(self.count(k) for k in kinds) or bool(self.gained or self.lost)

    def to_json(self) -> dict:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "moved": [list(pair) for pair in self.moved],
            "unchanged": self.unchanged,
            "gained": list(self.gained),
            "lost": list(self.lost),
            **({"counts": self.counts} if self.counts else {}),
        }

    def to_json_text(self, limit: int = LIMIT) -> str:
        """JSON of at most ``limit`` characters: the longest lists are cut first, the
        true counts kept in ``counts``."""
        changes, counts = self, {k: self.count(k) for k in ("added", "removed", "moved")}
        text = json.dumps(changes.to_json(), separators=(",", ":"))
        while len(text) > limit:
            kind = max(("added", "removed", "moved"), key=lambda k: len(getattr(changes, k)))
            if not getattr(changes, kind):
                break
            changes = replace(changes, **{kind: getattr(changes, kind)[:-1]}, counts=counts)
            text = json.dumps(changes.to_json(), separators=(",", ":"))
        return text

    @classmethod
    def from_json(cls, data: dict) -> RuleChanges:
        return cls(
            added=tuple(data.get("added", ())),
            removed=tuple(data.get("removed", ())),
            moved=tuple(tuple(pair) for pair in data.get("moved", ())),
            unchanged=int(data.get("unchanged", 0)),
            gained=tuple(data.get("gained", ())),
            lost=tuple(data.get("lost", ())),
            counts=data.get("counts"),
        )


def rules_of(text: str) -> list[str]:
    """The leaf rules of a rules text, without their share and purity."""
    lines = (line.strip() for line in text.splitlines())
    return [_STATS.sub("", line) for line in lines if line.startswith(("if ", "always "))]


def _shape(rule: str) -> str:
    return _NUMBER.sub("#", rule.rsplit(" then ", 1)[0]) + " then " + rule.rsplit(" then ", 1)[-1]


def rule_changes(from_rules: str, to_rules: str, from_features=(), to_features=()) -> RuleChanges:
    """Compare two rules texts and the features their surrogates use (module docstring).

    Examples
    --------
    >>> c = rule_changes("if a <= 1 then x (50.0% of samples, purity 90.0%)\\nalways y",
    ...                  "if a <= 2 then x (40.0% of samples, purity 95.0%)\\nif b > 0 then y",
    ...                  ("a",), ("a", "b"))
    >>> c.moved, c.added, c.removed, c.gained
    ((('if a <= 1 then x', 'if a <= 2 then x'),), ('if b > 0 then y',), ('always y',), ('b',))
    """
    before, after = rules_of(from_rules), rules_of(to_rules)
    unchanged = 0
    for rule in list(before):
        if rule in after:
            before.remove(rule)
            after.remove(rule)
            unchanged += 1
    moved = []
    for rule in list(before):
        match = next((other for other in after if _shape(other) == _shape(rule)), None)
        if match is not None:
            moved.append((rule, match))
            before.remove(rule)
            after.remove(match)
    return RuleChanges(
        added=tuple(after),
        removed=tuple(before),
        moved=tuple(moved),
        unchanged=unchanged,
        gained=tuple(f for f in to_features if f not in set(from_features)),
        lost=tuple(f for f in from_features if f not in set(to_features)),
    )
