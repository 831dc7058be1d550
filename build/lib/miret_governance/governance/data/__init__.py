"""Tables read safely and validated against an ensemble's inputs (Great Expectations)."""
