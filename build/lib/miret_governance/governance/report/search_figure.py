"""The hyperparameter search's trade-off: validation fidelity against features used.

:func:`plot_search_tradeoff` draws one point per candidate of
:class:`governance.miret.MiretSearchCV` (mean over the folds, with the fold standard
deviation as error bars), the tolerance band of the selection rule, and marks the chosen
candidate. :func:`save_search_figure` writes it as SVG (text kept as text) and PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure

CHOSEN_COLOR = "#b3261e"
POINT_COLOR = "#1f4e89"
PARAMETER_SYMBOLS = {"alpha": "alpha", "gamma_percentile": "h", "proximity_threshold": "m"}


def candidate_label(params: dict) -> str:
    """``alpha=0.5, h=33.3, m=0.9``: a candidate's parameters, short."""
    return ", ".join(
        f"{PARAMETER_SYMBOLS.get(name, name)}={value:.3g}"
        if isinstance(value, float)
        else f"{PARAMETER_SYMBOLS.get(name, name)}={value}"
        for name, value in sorted(params.items())
    )


def plot_search_tradeoff(cv_results: dict, best_index: int, tolerance: float) -> Figure:
    """Mean validation fidelity against mean features used, one point per candidate.

    Parameters
    ----------
    cv_results : dict
        ``MiretSearchCV.cv_results_`` (``mean_test_fidelity``, ``std_test_fidelity``,
        ``mean_test_n_features``, ``params``).
    best_index : int
        The chosen candidate (``best_index_``).
    tolerance : float
        The selection rule's fidelity tolerance (the band below the best fidelity).

    Returns
    -------
    matplotlib.figure.Figure
    """
    fidelity = np.asarray(cv_results["mean_test_fidelity"], dtype=np.float64)
    spread = np.asarray(cv_results["std_test_fidelity"], dtype=np.float64)
    features = np.asarray(cv_results["mean_test_n_features"], dtype=np.float64)
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    ax.errorbar(
        features,
        fidelity,
        yerr=spread,
        fmt="o",
        color=POINT_COLOR,
        ecolor="#9fb3c8",
        markersize=5,
        alpha=0.85,
        label=f"candidate ({fidelity.size}), mean ± std over the folds",
    )
    best = float(np.nanmax(fidelity))
    ax.axhspan(
        best - tolerance, best, color="#e3f2e5", zorder=0, label=f"within {tolerance:g} of the best"
    )
    ax.plot(
        features[best_index],
        fidelity[best_index],
        marker="*",
        markersize=16,
        color=CHOSEN_COLOR,
        linestyle="none",
        label="chosen: " + candidate_label(cv_results["params"][best_index]),
    )
    ax.set_xlabel("distinct features used (mean over the folds)", fontsize=10)
    ax.set_ylabel("validation fidelity", fontsize=10)
    ax.set_title("Hyperparameter search: fidelity against sparsity", fontsize=11)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.tick_params(labelsize=9)
    ax.grid(True, color="#e5e8ec", linewidth=0.6)
    ax.legend(fontsize=8.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    fig.tight_layout()
    return fig


def save_search_figure(cv_results: dict, best_index: int, tolerance: float, out_dir) -> Path:
    """Write ``search_tradeoff.svg`` and ``.png`` into ``out_dir``; return the SVG path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig = plot_search_tradeoff(cv_results, best_index, tolerance)
    fig.savefig(out_dir / "search_tradeoff.png", dpi=150, bbox_inches="tight")
    svg = out_dir / "search_tradeoff.svg"
    with rc_context({"svg.fonttype": "none"}):  # text stays text: readable when scaled
        fig.savefig(svg, bbox_inches="tight")
    return svg
