"""``govern watch``: serve MLflow's registry webhooks (``flavors.watch``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from miret_governance.cli import common
from miret_governance.cli.common import (
    InvalidInputError,
    PolicyFile,
    connect,
    console,
    existing_file,
    exit_codes,
    import_model_readers,
)

SECRET_ENV = "GOVERN_WEBHOOK_SECRET"
"""The environment variable holding the webhooks' shared secret, by default."""
PORT = 8790
"""The receiver's default port."""
STATE_DIR = ".govern-watch"
"""The default state folder (the accepted delivery ids), next to the watch file."""


def _secret(variable: str) -> str:
    """The shared secret from the environment variable ``variable``, never an option
    (a command line is visible to every user of the machine)."""
    secret = os.environ.get(variable, "")
    if len(secret) < 16:
        raise InvalidInputError(
            f"{variable} must hold the webhooks' shared secret (at least 16 characters; "
            f"{'it is shorter' if secret else 'it is not set'}): set it in the receiver's "
            "environment, the same one --register gives the webhook"
        )
    return secret


def watch(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help='Watch file (TOML): a [models."<registered model>"] table per governed '
            "model, with data = <file> its new versions are explained on and any explain "
            "option (target, time_limit, ...). Other models are ignored.",
            metavar="FILE",
            callback=existing_file,
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port.")] = PORT,
    secret_env: Annotated[
        str,
        typer.Option(
            "--secret-env",
            metavar="VAR",
            help="Environment variable holding the webhooks' shared secret.",
        ),
    ] = SECRET_ENV,
    register: Annotated[
        bool,
        typer.Option(
            "--register",
            help="Create (or update, for the same --url) the webhook on the tracking server "
            "instead of serving: model_version.created and model_version_alias.created and "
            ".deleted, signed with the shared secret. Needs --url.",
        ),
    ] = False,
    url: Annotated[
        str | None,
        typer.Option("--url", help="With --register: the URL the server delivers to."),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            metavar="DIR",
            help=f"Folder keeping the delivery ids accepted in the last 5 minutes, so a "
            f"delivery replayed after a restart is refused too (default: {STATE_DIR} next to "
            "--config); one receiver per folder.",
        ),
    ] = None,
    policy: PolicyFile = None,
    policy_trust: common.PolicyTrustFile = None,
    require_signed_policy: common.RequireSignedPolicy = False,
    signing_key: common.SigningKeyOption = None,
    signing_certificate: common.SigningCertificateOption = None,
    certificate_chain: common.CertificateChainOption = None,
    tracking_uri: common.TrackingUri = None,
) -> None:
    """Serve MLflow's registry webhooks: explain new versions, audit alias changes.

    Each delivery must carry the shared secret's HMAC signature, a timestamp within
    5 minutes and a delivery id not accepted before, even before a restart (--state-dir):
    anything else is refused (401, 400, 409) and nothing is done. A new version of a
    governed model (--config) is explained on its data, one at a time per model (a
    version already explained is reused).
    An alias set or deleted on a governed model audits it at once: each finding is
    printed, and each alias holder gets a signed audit verification record (failed
    when it has no valid promotion). At start, what the registry shows undone is
    caught up: versions without a surrogate, and an audit of each model holding an alias.
    """
    with exit_codes():
        secret = _secret(secret_env)
        if register:
            if not url:
                raise InvalidInputError("--register needs --url: the URL the server delivers to")
            connect(tracking_uri)
            from mlflow import MlflowClient

            from miret_governance.flavors.watch.receiver import register_webhook

            webhook, created = register_webhook(MlflowClient(), url, secret)
            done = "created" if created else "updated (same URL)"
            console.print(
                f"webhook {webhook.webhook_id} {done}: {', '.join(map(str, webhook.events))} "
                f"to {webhook.url}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            return
        if config is None:
            raise InvalidInputError("give --config <watch file> (or --register --url URL)")
        import_model_readers()
        from miret_governance.flavors.explain.faults import signals_raise
        from miret_governance.flavors.watch.config import load_watch_file
        from miret_governance.flavors.watch.deliveries import Verifier
        from miret_governance.flavors.watch.receiver import Receiver
        from miret_governance.flavors.watch.work import Watcher

        watched = load_watch_file(config)
        key = common.load_signing_key(signing_key, signing_certificate, certificate_chain)
        if key is None:
            raise InvalidInputError(
                "govern watch signs its explanations and audit records: give --signing-key "
                "(or GOVERN_SIGNING_KEY)"
            )
        parsed = common.load_checked_policy(policy, policy_trust, require_signed_policy)
        verifier = Verifier(secret, state=state_dir or config.parent / STATE_DIR)
        connect(tracking_uri, fail_fast=False)
        watcher = Watcher(watched, parsed, key, say)
        receiver = Receiver(verifier, watcher, say, host, port)
        where = receiver.start()
        say(f"watching {', '.join(watched)} at {where} under policy {parsed.label}")
        try:
            with signals_raise():  # SIGTERM and SIGHUP stop it as Ctrl-C does
                for job in watcher.catch_up():  # after start: nothing sent meanwhile is lost
                    say(f"caught up: queued {job}")
                while receiver.wait(1.0):
                    pass
        except KeyboardInterrupt:
            say("stopped: work not finished is caught up at the next start")
        finally:
            receiver.stop()


def say(line: str) -> None:
    """Print one outcome line of the watch."""
    console.print(line, highlight=False, markup=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``watch`` to the ``govern`` app."""
    app.command("watch")(watch)
