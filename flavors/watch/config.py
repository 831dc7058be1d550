"""Which registered models ``govern watch`` governs, and how it explains their versions.

The watch file (TOML) names each governed ensemble's registered model under
``[models."<name>"]`` with the data its new versions are explained on and, optionally,
the explain options ``govern explain`` takes (a path is relative to the file)::

    [models."credit-rf"]
    data = "data/credit.csv"
    target = "label"
    time_limit = 60

A delivery about any other model is acknowledged and ignored; an alias event on the
governed registered model of a watched model (the policy's ``[governed]``) audits the
watched model.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from miret_governance.governance.errors import InvalidInputError


@dataclass(frozen=True)
class WatchedModel:
    """One governed model of the watch file: its data and explain options (None: the
    explain default)."""

    name: str
    data: Path
    target: str | None = None
    test_data: Path | None = None
    depth: int | str | None = None
    alpha: float | None = None
    gamma_percentile: float | None = None
    proximity_threshold: float | None = None
    max_rows: int | None = None
    solver: str | None = None
    time_limit: float | None = None
    seed: int | None = None
    min_test_rows: int | None = None
    allow_invalid: bool | None = None

    def explain_options(self) -> dict:
        """Keyword arguments of :func:`flavors.explain.explain.explain_model_version`
        after the URI: the data, and each option the file sets."""
        given = {f.name: getattr(self, f.name) for f in fields(self)[2:]}
        options = {k: str(v) if isinstance(v, Path) else v for k, v in given.items()}
        return {"data": str(self.data)} | {k: v for k, v in options.items() if v is not None}


OPTIONS = tuple(f.name for f in fields(WatchedModel)[1:])
"""The keys of a ``[models."<name>"]`` table."""


def load_watch_file(path: Path) -> dict[str, WatchedModel]:
    """Registered model name -> :class:`WatchedModel` of the watch file ``path``.

    Raises
    ------
    InvalidInputError
        Not TOML, no ``[models]``, an unknown key, or a data file that is not there.
    """
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise InvalidInputError(f"watch file {path} does not read as TOML: {error}") from None
    tables = document.get("models")
    if not isinstance(tables, dict) or not tables or set(document) != {"models"}:
        raise InvalidInputError(
            f'watch file {path} must hold only [models."<registered model>"] tables, one '
            "per governed model, each with data = <file>"
        )
    watched = {}
    for name, table in tables.items():
        unknown = sorted(set(table) - set(OPTIONS)) if isinstance(table, dict) else ["?"]
        if unknown or "data" not in table:
            raise InvalidInputError(
                f'[models."{name}"] of {path}: needs data = <file> and takes only '
                f"{', '.join(OPTIONS)} (got {', '.join(unknown) or 'no data'})"
            )
        files = {k: path.parent / table[k] for k in ("data", "test_data") if k in table}
        for key, file in files.items():
            if not file.is_file():
                raise InvalidInputError(
                    f'[models."{name}"] {key} of {path}: {file} is not a file; give a CSV '
                    "or Parquet file (a path relative to the watch file)"
                )
        watched[name] = WatchedModel(name=name, **(table | files))
    return watched
