"""Each library's fitted trees read into the ensemble view, without running model code."""
