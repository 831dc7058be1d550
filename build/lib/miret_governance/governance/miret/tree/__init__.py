"""The fitted oblique tree: its rules, missing values, splits in words, one row's path."""
