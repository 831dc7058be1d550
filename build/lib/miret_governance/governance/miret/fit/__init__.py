"""One fit and its choices: the engine, held-out selection, the grid, the estimators, persistence."""
