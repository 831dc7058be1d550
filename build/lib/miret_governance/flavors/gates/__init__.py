"""Gates on signed evidence: the evidence check, the gate run, recomputed fidelity, drift."""
