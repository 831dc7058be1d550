"""The root of every exception the product raises on purpose.

Every refusal derives from :class:`GovernanceError`, so a caller (the ``govern`` CLI, a
notebook, a pipeline) catches one class. The CLI maps the root to exit code 2 and
:class:`CheckFailedError` to exit code 1 (``cli.common.exit_code``, the one mapping).
A gate verdict is an outcome, not an exception. This module imports nothing, so the
domain layer defines its refusals without MLflow.
"""


class GovernanceError(Exception):
    """A request that cannot be carried out; nothing was registered or promoted.

    Exit code 2. Its message names the problem and the fix.
    """


class CheckFailedError(GovernanceError):
    """A check the request asked for ran and failed (the input validation, a
    reproduction that differs), as opposed to a request that could not be carried out.

    Exit code 1.
    """
