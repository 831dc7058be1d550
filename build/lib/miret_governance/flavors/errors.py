"""Refusals of the orchestration: each names the problem and the fix.

They derive from :class:`governance.errors.GovernanceError`, the one root of the
product's exceptions (re-exported here with :class:`CheckFailedError`), and say in
their docstrings which exit code of the ``govern`` CLI they map to.
"""

from miret_governance.governance.errors import CheckFailedError, GovernanceError

__all__ = [
    "CheckFailedError",
    "ExplainError",
    "GateError",
    "GovernanceError",
    "ValidationFailedError",
]


class ExplainError(GovernanceError):
    """A request that cannot be explained (bad URI, unsupported model, bad data).

    Exit code 2.
    """


class ValidationFailedError(ExplainError, CheckFailedError):
    """The input data failed validation; nothing was registered.

    Exit code 1.

    Attributes
    ----------
    run_id : str or None
        The explain run that holds ``validation.json``.
    summary : str
        One line per failed expectation.
    """

    def __init__(self, message: str, run_id: str | None = None, summary: str = ""):
        super().__init__(message)
        self.run_id = run_id
        self.summary = summary


class GateError(GovernanceError):
    """Gates cannot be evaluated: no linked surrogate, bad alias, unreachable server.

    Exit code 2 (a gate that fails is a verdict, not an error: exit code 1).
    """
