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


class InvalidInputError(GovernanceError, ValueError):
    """A value that is not allowed: a parameter, a column, a model or a file's content
    (a ``ValueError`` too, as scikit-learn's conventions expect). Exit code 2."""


class InvalidTypeError(GovernanceError, TypeError):
    """An object of the wrong type where a caller passed one (a ``TypeError`` too).
    Exit code 2."""


class UnknownNameError(GovernanceError, KeyError):
    """A name that is not there: a column, an encoded feature (a ``KeyError`` too).
    Exit code 2."""

    def __str__(self) -> str:  # KeyError would print the message's repr
        return str(self.args[0]) if self.args else ""


class InternalError(GovernanceError, RuntimeError):
    """A result the product itself produced that breaks its own invariant (a bug to
    report, never the caller's input). Exit code 2."""


class MissingDependencyError(GovernanceError, ImportError):
    """An optional dependency a requested feature needs is not installed (the message
    says which extra to install). Exit code 2."""
