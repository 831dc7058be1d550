"""One MIRET instance: its data, proximity components, row sample and tree layout."""
