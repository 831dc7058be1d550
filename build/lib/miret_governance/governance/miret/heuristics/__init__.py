"""The warm start: CART and optimal univariate seeds, greedy growth, cut scans, local search."""
