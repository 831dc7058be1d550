"""The data path on Spark: tables read from a session, and what the pandas path measures
(digest, fidelity, missing shares) computed as Spark jobs with equal results."""
