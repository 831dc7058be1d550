"""Refusals of the orchestration: each names the problem and the fix.

The CLI turns every :class:`GovernanceError` into a clear message and exit code 2
(:class:`ValidationFailedError`: exit code 1).
"""


class GovernanceError(Exception):
    """A request that cannot be carried out; nothing was registered or promoted."""


class ExplainError(GovernanceError):
    """A request that cannot be explained (bad URI, unsupported model, bad data)."""


class ValidationFailedError(ExplainError):
    """The input data failed validation; nothing was registered.

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
    """Gates cannot be evaluated: no linked surrogate, bad alias, unreachable server."""
