"""Rewrites that keep the math, as routes verify measures end to end like the kernels': batch norm folding.

A batch norm folded into the convolution or linear before it (autokernel/routing/bn_folding.py) is no kernel
and has no call signature to time alone: it changes the model's parameters once. So it enters verify's
selection (autokernel/verify/selection.py) as one more candidate, with a route record of its own (named
NAME) and no predicted gain: after the kernels that won alone, it is tried in the model, eagerly and
compiled, each timed paired with PyTorch's own path, and kept in a mode only if the whole model gets faster
with it than with the best so far. It is off during the check with every kernel routed: folded, a region
that computes a convolution with its batch norm is no longer in the model's graph, so its kernel would take
no call. Whether the fold stays against a region kernel over the same ops is for the selection to find:
the trial times the model with both routed, where the fold hides the region from its kernel.

Where verify's verdict hands over a path of ours with the fold on, its code says so
(`autokernel.fold_batch_norms(model, inputs)`), and autokernel.optimize folds the model it hands back.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from autokernel.core.dtypes import dtype_name
from autokernel.routing.bn_folding import BatchNormFolding, fold_batch_norms
from autokernel.routing.decisions import ALL
from autokernel.routing.manifest import RouteRecord
from autokernel.verify.route_table import NOT_TIMED_ON_CPU

NAME = "batch norm folding"
REPORT_KEY = "batch_norm_folding"       # its summary in verify's report
USE_CODE = "autokernel.fold_batch_norms(model, inputs)"
NOT_TIMED = "a rewrite of the model's parameters: no call of its own to time, judged end to end only"
OFF_UNDER_ALL = "off under the \"all\" policy: folded, the regions it covers would hide from their kernels"


@dataclass
class Rewrite:
    """The folding of one model under verify, and its route record, whose flags the selection turns."""
    folding: BatchNormFolding
    record: RouteRecord | None          # None where nothing folds: nothing to try
    trying: bool = False                # the selection tries it (the "measured" policy, on a GPU)

    def sync(self) -> None:
        """The folding follows its record's flags (the selection changed them, or verify starts the check)."""
        self.folding.eager = bool(self.record and self.record.route_eager)
        self.folding.compiled = bool(self.record and self.record.route_compiled)

    def candidate(self, mode: str) -> None:
        """A candidate of this mode's selection (selection.MODES: "eager" or "compiled"): on in its record until a
        trial drops it. Only then, so that a mode with no selection (no compiled variant) never says it is on."""
        if self.record is not None and self.trying:
            setattr(self.record, "route_eager" if mode == "eager" else "route_compiled", True)

    def off(self) -> None:
        self.folding.eager = self.folding.compiled = False

    def summary(self) -> dict:
        return {"folds": [fold.label for fold in self.folding.folds], "rejected": dict(self.folding.rejected),
                "eager": self.folding.eager, "compiled": self.folding.compiled}


def batch_norm_folding(model: nn.Module, inputs: tuple, policy: str, on_gpu: bool) -> Rewrite | None:
    """The model's batch norms folded (off until each mode's selection tries them), or None where it has none to fold
    (no batch norm, or the model in training mode: then the fold is not inference's)."""
    if model.training or not any(isinstance(m, _BatchNorm) for m in model.modules()):
        return None
    folding = fold_batch_norms(model, inputs)
    rewrite = Rewrite(folding, None)
    if folding.folds:
        parameter = next(model.parameters())
        rewrite.trying = policy != ALL and on_gpu
        why = NOT_TIMED if on_gpu else NOT_TIMED_ON_CPU
        rewrite.record = RouteRecord(shape={"folds": len(folding.folds)}, dtype=dtype_name(parameter.dtype),
                                     site=f"fold {', '.join(f.label for f in folding.folds)}",
                                     calls=len(folding.folds),
                                     why=why if policy != ALL else OFF_UNDER_ALL)
    rewrite.off()
    return rewrite


def use_code(code: str, rewrite_on: bool) -> str:
    """The verdict's code with the fold first, where the path it names runs folded."""
    return f"{USE_CODE}; {code}" if rewrite_on else code
