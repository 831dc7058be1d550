"""The explain workflow: request, stages in one MLflow run, search, reuse, faults, publishing."""
