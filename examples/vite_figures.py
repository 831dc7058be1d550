"""VITE figures of the paper's random forest on two UCI datasets (Wisconsin, Sonar).

Trains ``Pipeline(MinMaxScaler, RandomForestClassifier(max_depth=3, n_estimators=100,
max_features=None))`` as in the paper and writes the level-frequency heatmap and the
representative tree to ``demo-output/figures/<dataset>/``. Run:
``.venv/bin/python examples/vite_figures.py``.
"""

from pathlib import Path

import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler

from miret_governance.governance.ensembles.readers.reading import read_ensemble
from miret_governance.governance.report.figures import save_vite_figures

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data"
OUT = ROOT / "demo-output" / "figures"
DATASETS = ("Wisconsin", "Sonar")


def load(name: str) -> tuple[pd.DataFrame, pd.Series]:
    """A UCI dataset from examples/data: header row, 0/1 label in the last column."""
    frame = pd.read_csv(DATA / f"{name}.csv")
    X = frame.iloc[:, :-1]
    # Sonar's columns are numbered (energy in frequency bands): name them x0, x1, ...
    X = X.rename(columns=lambda c: f"x{c}" if str(c).isdigit() else c)
    return X, frame.iloc[:, -1]


def figures_for(name: str) -> list[Path]:
    X, y = load(name)
    forest = RandomForestClassifier(
        max_depth=3, n_estimators=100, max_features=None, random_state=0
    )
    pipeline = make_pipeline(MinMaxScaler(), forest).fit(X, y)
    return save_vite_figures(read_ensemble(pipeline), OUT / name.lower())


def main() -> None:
    for name in DATASETS:
        for path in figures_for(name):
            print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
