"""What the two MLP types, fused_mlp and rmsnorm_mlp, share: how a gated MLP module is read from its structure.

The profiler recognises a gated MLP by its Linear children's sizes (gated_mlp_dims); the router,
which must also know which linear is which, by their names (mlp_linears). Its activation is read
from the trace by the profiler, and from the activation module it holds by the router.
"""

from __future__ import annotations

from torch import nn


def gated_mlp_dims(module: nn.Module) -> tuple[int, int] | None:
    """(D, F) when the module's direct Linear children are a gated MLP's gate, up and down
    (D -> F each, or one fused D -> 2F, and F -> D)."""
    linears = [child for child in module.children() if isinstance(child, nn.Linear)]
    for down in linears:
        dim, hidden = down.out_features, down.in_features
        inputs = [lin for lin in linears if lin is not down and lin.in_features == dim]
        separate = len(linears) == 3 and len(inputs) == 2 and all(lin.out_features == hidden for lin in inputs)
        fused = len(linears) == 2 and len(inputs) == 1 and inputs[0].out_features == 2 * hidden
        if separate or fused:
            return dim, hidden
    return None


_MLP_ROLES = {"gate": ("gate", "w1"), "up": ("up", "w3"), "down": ("down", "w2")}


def mlp_linears(module: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear] | None:
    """(gate, up, down) of a gated MLP: bias-free nn.Linear children named gate / up / down (or w1 / w3 / w2),
    gate and up (F, D) and down (D, F); None for any other module."""
    linears = {}
    for role, hints in _MLP_ROLES.items():
        found = [child for name, child in module.named_children()
                 if isinstance(child, nn.Linear) and child.bias is None and (name == hints[1] or hints[0] in name)]
        if len(found) != 1:
            return None
        linears[role] = found[0]
    gate, up, down = linears["gate"], linears["up"], linears["down"]
    if not (gate.weight.shape == up.weight.shape == down.weight.t().shape):
        return None
    return gate, up, down


def is_gated_mlp_module(module: nn.Module) -> bool:
    return mlp_linears(module) is not None


# An activation module an MLP keeps as an attribute (HF: act_fn), and the classes (by name: HF's
# own, or torch's) that compute each of the kernels' activations.
_ACTIVATION_ATTRIBUTES = ("act_fn", "act", "activation", "activation_fn")
_ACTIVATION_CLASSES = {
    "SiLU": "silu", "SiLUActivation": "silu",
    "GELUTanh": "gelu", "PytorchGELUTanh": "gelu", "NewGELUActivation": "gelu", "FastGELUActivation": "gelu",
    "ReLUSquaredActivation": "relu2",
}


def mlp_activation(module: nn.Module) -> str:
    """The MLP's activation, from an activation module it holds; "silu" (the LLaMA family's) when it holds none.

    A guess: the router checks the folded result against the norm and the MLP's own forward on
    the first call, and a wrong activation turns the fold off there. An activation no kernel runs
    gives its class name, which matches no verified shape."""
    for name in _ACTIVATION_ATTRIBUTES:
        act = getattr(module, name, None)
        if isinstance(act, nn.GELU):
            return "gelu" if act.approximate == "tanh" else "GELU"
        if isinstance(act, nn.Module):
            return _ACTIVATION_CLASSES.get(type(act).__name__, type(act).__name__)
    return "silu"
