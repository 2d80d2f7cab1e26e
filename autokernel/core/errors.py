"""The run's own error, which every layer may raise: a run cannot start, resume or go on, and the message says why.

It lives here, not with the run's state (search/run_state.py), so that the layers below the search (the fleet's
workers, the profile's planning) raise it without importing the layer above them.
"""


class OptimizationError(Exception):
    """A run cannot start, resume or go on; the message says why and what to do."""


def failure_line(exc: BaseException) -> str:
    """One line for a failure: a compiler's wrapper ("BackendCompilerFailed: backend='inductor' raised:") says
    nothing on its first line, so the error it wraps is named too."""
    inner = getattr(exc, "inner_exception", None)
    line = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if isinstance(inner, BaseException):
        line = f"{line} {type(inner).__name__}: {inner}".splitlines()[0]
    return line[:300]
