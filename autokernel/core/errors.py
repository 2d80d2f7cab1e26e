"""The run's own error, which every layer may raise: a run cannot start, resume or go on, and the message says why.

It lives here, not with the run's state (search/run_state.py), so that the layers below the search (the fleet's
workers, the profile's planning) raise it without importing the layer above them.
"""


class OptimizationError(Exception):
    """A run cannot start, resume or go on; the message says why and what to do."""
