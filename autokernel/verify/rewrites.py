"""Rewrites that keep the math, as routes verify measures end to end like the kernels': batch norm folding, and linears
that read the same input concatenated into one GEMM.

A batch norm folded into the convolution or linear before it (autokernel/routing/bn_folding.py), and the query, key
and value projections (or gate and up) run as one GEMM (autokernel/routing/linear_concat.py), are no kernels and
have no call signature to time alone: each changes how the model computes once. So each enters verify's selection
(autokernel/verify/selection.py) as one more candidate, with a route record of its own (named by its kind) and no
predicted gain: after the kernels that won alone, it is tried in the model, eagerly and compiled, each timed paired
with PyTorch's own path, and kept in a mode only if the whole model gets faster with it than with the best so far.
Each is off during the check with every kernel routed: rewritten, a region that computes a convolution with its
batch norm (or a linear the router would take) is no longer in the model's graph, so its kernel would take no call.
Whether a rewrite stays against a kernel over the same ops is for the selection to find: the trial times the model
with both routed.

Where verify's verdict hands over a path of ours with a rewrite on, its code says so
(`autokernel.fold_batch_norms(model, inputs)`, `autokernel.concat_linears(model, inputs)`), and
autokernel.optimize rewrites the model it hands back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from autokernel.core.dtypes import dtype_name
from autokernel.routing.bn_folding import BatchNormFolding, fold_batch_norms, unfold_batch_norms
from autokernel.routing.decisions import ALL
from autokernel.routing.linear_concat import LinearConcat, concat_linears, unconcat_linears
from autokernel.routing.manifest import RouteRecord
from autokernel.verify.route_table import NOT_TIMED_ON_CPU

NOT_TIMED = "a rewrite of the model: no call of its own to time, judged end to end only"
OFF_UNDER_ALL = "off under the \"all\" policy: rewritten, the ops it covers would hide from their kernels"


@dataclass(frozen=True)
class Kind:
    """One rewrite as verify knows it: its route record's name, its report section, the verdict's flag, its code."""
    name: str                        # the kernel name its route record goes under
    report_key: str                  # its summary in verify's report, and Verdict's field: the path runs with it on
    use_code: str                    # the verdict's code for it
    items_key: str                   # what its summary lists: its folds, its groups
    verb: str                        # "fold bn into conv", "concat q + k + v": its route record's site
    has_candidates: Callable[[nn.Module], bool]    # a model where it cannot apply is not even watched
    apply: Callable                  # (model, inputs) -> BatchNormFolding | LinearConcat
    undo: Callable[[nn.Module], nn.Module]
    items: Callable                  # its applied object -> the folds or groups it made (each with .label)


BATCH_NORM_FOLDING = Kind(
    "batch norm folding", "batch_norm_folding", "autokernel.fold_batch_norms(model, inputs)",
    "folds", "fold", lambda model: any(isinstance(m, _BatchNorm) for m in model.modules()), fold_batch_norms,
    unfold_batch_norms, lambda folding: folding.folds)
LINEAR_CONCAT = Kind(
    "linear concatenation", "linear_concat", "autokernel.concat_linears(model, inputs)",
    "groups", "concat", lambda model: sum(isinstance(m, nn.Linear) for m in model.modules()) > 1, concat_linears,
    unconcat_linears, lambda concat: concat.groups)
# Applied in this order (a linear a batch norm folds into is patched already, so it is not concatenated), and undone
# in the opposite one: patches come off in the order opposite to the one they went on in.
KINDS = (BATCH_NORM_FOLDING, LINEAR_CONCAT)


@dataclass
class Rewrite:
    """One rewrite of one model under verify, and its route record, whose flags the selection turns."""
    kind: Kind
    applied: BatchNormFolding | LinearConcat
    record: RouteRecord | None          # None where it changed nothing: nothing to try
    trying: bool = False                # the selection tries it (the "measured" policy, on a GPU)

    def sync(self) -> None:
        """The rewrite follows its record's flags (the selection changed them, or verify starts the check)."""
        self.applied.eager = bool(self.record and self.record.route_eager)
        self.applied.compiled = bool(self.record and self.record.route_compiled)

    def candidate(self, mode: str) -> None:
        """A candidate of this mode's selection (selection.MODES: "eager" or "compiled"): on in its record until a
        trial drops it. Only then, so that a mode with no selection (no compiled variant) never says it is on."""
        if self.record is not None and self.trying:
            setattr(self.record, "route_eager" if mode == "eager" else "route_compiled", True)

    def off(self) -> None:
        self.applied.eager = self.applied.compiled = False

    def on_in(self, compiled: bool) -> bool:
        return self.applied.compiled if compiled else self.applied.eager

    def summary(self) -> dict:
        return {self.kind.items_key: [item.label for item in self.kind.items(self.applied)],
                "rejected": dict(self.applied.rejected), "eager": self.applied.eager,
                "compiled": self.applied.compiled}


def rewrite(kind: Kind, model: nn.Module, inputs: tuple, policy: str, on_gpu: bool) -> Rewrite | None:
    """The model rewritten by `kind` (off until each mode's selection tries it), or None where it has nothing to
    rewrite (or the model is in training mode: these rewrites are inference's)."""
    if model.training or not kind.has_candidates(model):
        return None
    applied = kind.apply(model, inputs)
    rewritten = Rewrite(kind, applied, None)
    items = kind.items(applied)
    if items:
        parameter = next(model.parameters())
        rewritten.trying = policy != ALL and on_gpu
        why = NOT_TIMED if on_gpu else NOT_TIMED_ON_CPU
        rewritten.record = RouteRecord(shape={kind.items_key: len(items)}, dtype=dtype_name(parameter.dtype),
                                       site=_site(kind.verb, [item.label for item in items]),
                                       calls=len(items), why=why if policy != ALL else OFF_UNDER_ALL)
    rewritten.off()
    return rewritten


def _site(verb: str, labels: list[str], shown: int = 2) -> str:
    """The route table's site: the first few of what it rewrote (its report section lists them all), so that a
    32-layer model's 64 groups of linears do not make a row of kilobytes."""
    more = f" and {len(labels) - shown} more" if len(labels) > shown else ""
    return f"{verb} {', '.join(labels[:shown])}{more}"


def undo_all(model: nn.Module) -> nn.Module:
    """Every rewrite taken off the model, in the order opposite to KINDS'."""
    for kind in reversed(KINDS):
        kind.undo(model)
    return model


def use_code(code: str, rewrites: list[Rewrite], compiled: bool) -> str:
    """The verdict's code with the rewrites first (in the order they go on), where the path it names runs with them."""
    return "; ".join([*(r.kind.use_code for r in rewrites if r.on_in(compiled)), code])
