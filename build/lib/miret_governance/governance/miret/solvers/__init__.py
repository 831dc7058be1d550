"""The MILP solvers (HiGHS, Gurobi) behind one interface, stopped on counted work."""
