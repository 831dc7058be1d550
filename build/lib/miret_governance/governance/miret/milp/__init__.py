"""The MIRET mixed-integer program: the whole model, feasibility, one node's re-optimization."""
