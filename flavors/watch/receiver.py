"""The HTTP side of ``govern watch``: a Starlette app served by uvicorn (both MLflow's
own server dependencies), and the registration of its webhooks on the tracking server.

``POST`` (any path) takes a delivery: it is checked (:class:`flavors.watch.deliveries.Verifier`),
refused with a 4xx and one line (nothing queued), or queued (:class:`flavors.watch.work.Watcher`)
and answered ``202`` at once; the work runs after the answer. ``GET /health`` answers
``ok``. MLflow's tracking server delivers only to URLs its own settings allow: ``https``
unless ``MLFLOW_WEBHOOK_ALLOWED_SCHEMES`` lists ``http``, and public addresses unless
``MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS=true`` (``docs/deployment.md``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import uvicorn
from mlflow.entities.webhook import WebhookStatus
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from miret_governance.flavors.errors import GovernanceError
from miret_governance.flavors.watch.deliveries import EVENTS, DeliveryRefused, Verifier
from miret_governance.flavors.watch.work import Watcher

WEBHOOK_NAME = "govern-watch"
"""The name ``--register`` gives the webhook it creates."""


def app(verifier: Verifier, watcher: Watcher, say: Callable) -> Starlette:
    """The receiver's ASGI app."""

    async def deliver(request: Request) -> PlainTextResponse:
        body = await request.body()
        try:
            delivery = verifier.check(request.headers, body, time.time())
        except DeliveryRefused as refused:
            say(f"refused ({refused.status}): {refused}")
            return PlainTextResponse(str(refused), status_code=refused.status)
        outcome = watcher.accept(delivery)
        say(f"{delivery.event} {delivery.name}: {outcome}")
        return PlainTextResponse(outcome, status_code=202)

    async def health(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/{path:path}", deliver, methods=["POST"]),
    ]
    return Starlette(routes=routes)


class Receiver:
    """The receiver on ``host``:``port`` (0: a free port), served on a thread."""

    def __init__(self, verifier: Verifier, watcher: Watcher, say: Callable, host: str, port: int):
        config = uvicorn.Config(
            app(verifier, watcher, say),
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="watch receiver")
        self.url = ""

    def start(self) -> str:
        """Serve; the receiver's URL once it accepts connections."""
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise GovernanceError(
                    f"the receiver could not listen on {self._server.config.host}:"
                    f"{self._server.config.port} (in use, or not an address of this host)"
                )
            time.sleep(0.02)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}/"
        return self.url

    def wait(self, seconds: float | None = None) -> bool:
        """Block until the receiver stops (or ``seconds`` pass); whether it runs still."""
        self._thread.join(seconds)
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop accepting deliveries (queued work is the watcher's)."""
        self._server.should_exit = True
        self._thread.join()


def register_webhook(client, url: str, secret: str) -> tuple:
    """The webhook delivering :data:`EVENTS` to ``url`` signed with ``secret``: an
    existing one with that URL, updated to those events, that secret and active, or a
    new one. Returns ``(webhook, created)``."""
    token, found = None, None
    while found is None:
        page = client.list_webhooks(max_results=100, page_token=token)
        found = next((w for w in page if w.url == url), None)
        token = page.token
        if not token:
            break
    if found is not None:
        updated = client.update_webhook(
            found.webhook_id, events=list(EVENTS), secret=secret, status=WebhookStatus.ACTIVE
        )
        return updated, False
    created = client.create_webhook(
        WEBHOOK_NAME,
        url,
        list(EVENTS),
        description="govern watch: explain new versions, audit alias changes",
        secret=secret,
    )
    return created, True
