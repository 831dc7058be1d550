"""MLflow's registry and artifact store: tags and URIs, outages, safe model loading, data files."""
