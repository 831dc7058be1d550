"""Credit-like rows with categorical columns, shared by the encoding tests."""

import numpy as np
import pandas as pd


def credit_frame(n=600, seed=0):
    """Credit-like rows: 2 categorical and 3 numeric columns, a label from both kinds."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "purpose": rng.choice(["business", "car", "education", "furniture"], n),
            "housing": rng.choice(["free", "own", "rent"], n),
            "income": rng.normal(42000, 9000, n).round(),
            "age": rng.integers(18, 70, n).astype(float),
            "duration": rng.integers(6, 60, n).astype(float),
        }
    )
    label = ((frame.purpose == "car") & (frame.income > 40000)) | (
        (frame.housing == "rent") & (frame.age < 30)
    )
    flip = rng.random(n) < 0.1
    return frame, (label ^ flip).astype(int).to_numpy()
