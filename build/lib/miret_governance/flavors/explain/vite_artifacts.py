"""The VITE files of one explain run: tables under ``vite/``, heatmaps under ``figures/``.

A boosted ensemble of ``k > 2`` classes grows one tree per class and iteration; each
class's trees get their own tables and figures (``vite/class_<label>/``,
``figures/class_<label>/``) beside the view of all trees, so a reviewer sees which
features build which class's score.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from miret_governance.governance.measures.metrics import class_metric_name

CLASS_FOLDER_PREFIX = "class_"


@dataclass(frozen=True)
class ViteArtifacts:
    """Threshold ranges (a frame) and the figure files of :func:`vite_artifacts`."""

    ranges: object
    figures: tuple


def class_folder(label) -> str:
    """Folder name of one class's VITE files: ``class_<label>`` with the label made safe
    the way per-class metric names are (:func:`governance.metrics.class_metric_name`)."""
    return class_metric_name("", label).lstrip("_")


def _write_tables(ensemble, vite_dir: Path):
    from miret_governance.governance.measures import vite

    vite_dir.mkdir(parents=True)
    levels = vite.level_frequency(ensemble)
    levels.to_csv(vite_dir / "level_frequency.csv", index_label="feature")
    levels.to_json(vite_dir / "level_frequency.json", orient="split", indent=1)
    vite.node_frequency(ensemble).to_csv(vite_dir / "node_frequency.csv", index_label="position")
    if ensemble.encoding is not None:  # per original column too: a one-hot group summed
        by_column = vite.level_frequency_by_column(ensemble)
        by_column.to_csv(vite_dir / "level_frequency_by_column.csv", index_label="feature")
        by_column.to_json(vite_dir / "level_frequency_by_column.json", orient="split", indent=1)
        vite.node_frequency_by_column(ensemble).to_csv(
            vite_dir / "node_frequency_by_column.csv", index_label="position"
        )
    ranges = vite.threshold_ranges(ensemble)
    ranges.to_csv(vite_dir / "threshold_ranges.csv", index=False)
    splits = vite.category_splits(ensemble)  # native categorical splits: no threshold
    if len(splits):
        splits.to_csv(vite_dir / "category_splits.csv", index=False)
    return ranges


def vite_artifacts(ensemble, out: Path) -> ViteArtifacts:
    """Write the VITE tables to ``out/vite`` and the heatmaps to ``out/figures`` (for an
    ensemble on a pipeline's encoded columns, also the ``*_by_column`` tables; for a
    boosted ensemble of more than two classes, also per class)."""
    from miret_governance.governance.report.figures import save_vite_figures

    ranges = _write_tables(ensemble, out / "vite")
    figures = list(save_vite_figures(ensemble, out / "figures"))
    for index, label in enumerate(ensemble.classes):
        trees = ensemble.for_class(index)
        if trees is None or trees.max_depth == 0:
            continue
        folder = class_folder(label)
        _write_tables(trees, out / "vite" / folder)
        figures += save_vite_figures(trees, out / "figures" / folder)
    return ViteArtifacts(ranges, tuple(Path(p) for p in figures))
