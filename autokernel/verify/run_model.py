"""`autokernel verify` with no model verifies the model the run optimized, with the arguments it was given.

A run records in its state (workspace/state.json, RunState.model) the flags that named its model
(the file, --model-arg, --input-shape, ...) and the inputs it profiled. Kernels are routed only at the
shapes they were verified for, so verifying the same file with other arguments (the default config
instead of config=tiny) checks another model, at shapes no kernel took: that is why verify with no
model takes the run's own, and says so.
"""

from __future__ import annotations

from pathlib import Path

from autokernel.profile.model_args import shown_flags
from autokernel.search import run_state


class NoRunModel(Exception):
    """No model named and none recorded to take: the message says what to give."""


def recorded_flags(workspace: Path) -> tuple[list[str], str]:
    """The recorded model flags of the run saved in `workspace`, and a line that says which run and model they are."""
    state_path = workspace / run_state.STATE_FILE_NAME
    if not state_path.exists():
        raise NoRunModel(f"give the model to verify (a model file, or --hf NAME): there is no run in {state_path} "
                         f"to take it from")
    try:
        state = run_state.load(state_path)
    except run_state.StateError as error:
        raise NoRunModel(f"give the model to verify (a model file, or --hf NAME): {error}") from None
    if not state.model or not state.model.get("flags"):
        raise NoRunModel(f"run {state.tag} in {state_path} did not record its model (a model given in Python, or a "
                         f"run from before models were recorded): give the model to verify, with the arguments "
                         f"the run was given")
    flags = [str(flag) for flag in state.model["flags"]]
    return flags, f"verifying the model run {state.tag} optimized: {shown_flags(flags)}"

