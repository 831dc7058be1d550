"""What is measured on an ensemble and its surrogate: VITE, fidelity, proximity, drift."""
