"""``govern watch``: MLflow's registry webhooks, verified and acted on
(:mod:`flavors.watch.deliveries` checks a delivery, :mod:`flavors.watch.work` queues and
does the work, :mod:`flavors.watch.receiver` serves them over HTTP)."""
