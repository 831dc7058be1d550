"""Read-side commands: what show, explain-row and reproduce present, and the MLflow evaluator."""
