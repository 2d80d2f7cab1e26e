"""flash_attention: softmax(Q K^T * scale) V, causal or not, with grouped- and multi-query heads. Inputs, shapes
and the large-score case; SDPA's aten ops in a trace; F.scaled_dot_product_attention without mask or dropout
routed."""

from __future__ import annotations

import math

import torch.nn.functional as F

from autokernel.kernel_types import references as reference
from autokernel.kernel_types.base import (Adversarial, KernelType, Reading, Recognition, Routing, Shape, bhsd,
                                          randn, recorded_argument)


def kv_heads(s) -> int:
    """Key/value heads: "KV" for grouped- or multi-query attention (dividing H), else H."""
    return int(s.get("KV", s["H"]))


def attention_inputs(s, dtype, gen, device, qk_scale=1.0):
    queries = (s["B"], s["H"], s["S"], s["D"])
    keys = (s["B"], kv_heads(s), s["S"], s["D"])
    return {
        "q": randn(queries, dtype, gen, device, scale=qk_scale),
        "k": randn(keys, dtype, gen, device, scale=qk_scale),
        "v": randn(keys, dtype, gen, device),
        "causal": bool(s.get("causal", 0)),
        "sm_scale": float(s["sm_scale"]) if "sm_scale" in s else None,
    }


def _flops(s):
    full = 4.0 * s["B"] * s["H"] * s["S"] * s["S"] * s["D"]
    return full / 2 if s.get("causal", 0) else full


def _shapes(rows) -> list[Shape]:
    """(B, H, KV, S, D, causal) rows as shapes; KV is left out where it equals H."""
    return [{"B": b, "H": h, **({"KV": kv} if kv != h else {}), "S": sq, "D": d, "causal": c}
            for b, h, kv, sq, d, c in rows]


# --------------------------------------------------------------------------- the profiler
def claims_op(op: str, trace_ops: set[str]) -> bool:
    """SDPA's own ops on every backend (aten::_scaled_dot_product_flash_attention, ..._math, ...)."""
    return op.startswith("aten::_scaled_dot_product") or op == "aten::scaled_dot_product_attention"


def op_shape(op: str, event, shapes: list[list[int]]) -> dict | None:
    if not shapes[0]:
        return None
    shape = bhsd(shapes[0])
    if shape is None:
        return None
    key = shapes[1] if len(shapes) > 1 else None
    heads = (bhsd(key) or {}).get("H", shape["H"])
    if heads != shape["H"] and heads and shape["H"] % heads == 0:
        # Grouped- or multi-query attention: fewer key/value heads than query heads (the registry's "KV").
        shape = {"B": shape["B"], "H": shape["H"], "KV": heads, "S": shape["S"], "D": shape["D"]}
    shape["causal"] = int(bool(recorded_argument(event, "is_causal")))
    scale = recorded_argument(event, "scale")
    if isinstance(scale, float) and not math.isclose(scale, 1.0 / math.sqrt(shape["D"]), rel_tol=1e-6):
        shape["sm_scale"] = scale
    return shape


def sdpa(q, k, v, causal: bool = False, sm_scale: float | None = None):
    """The reference's function as PyTorch's fused op computes it (its shapes are square: causal masks agree)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,
                                          enable_gqa=k.shape[-3] != q.shape[-3])


# --------------------------------------------------------------------------- the router
def read_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    if attn_mask is not None or dropout_p:
        return "attention with a mask or dropout"
    if key.shape != value.shape or query.dim() not in (3, 4) or key.dim() != query.dim():
        return "q, k and v are not (B, H, S, D) tensors with k and v of one shape"
    batch, heads, seq, head_dim = query.shape if query.dim() == 4 else (1, *query.shape)
    kv = key.shape[-3]
    if key.shape[:-3] != query.shape[:-3] or key.shape[-2:] != query.shape[-2:] or heads % kv:
        return "k and v differ from q other than in fewer heads that divide q's (grouped-query attention)"
    if kv != heads and not enable_gqa:
        return "fewer key/value heads than query heads without enable_gqa"
    shape = {"B": batch, "H": heads, **({"KV": kv} if kv != heads else {}), "S": seq, "D": head_dim,
             "causal": int(bool(is_causal))}
    if scale is not None and not math.isclose(scale, 1.0 / math.sqrt(head_dim), rel_tol=1e-6):
        shape["sm_scale"] = scale
    return Reading(shape, (query, key, value), _launch_attention)


def _launch_attention(fn, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                      enable_gqa=False):
    q, k, v = (t.reshape(t.shape if t.dim() == 4 else (1, *t.shape)).contiguous() for t in (query, key, value))
    return fn(q, k, v, bool(is_causal), None if scale is None else float(scale)).reshape(query.shape)


KERNEL_TYPE = KernelType(
    name="flash_attention",
    profiled_ops=frozenset({"aten::_flash_attention_forward", "aten::_efficient_attention_forward"}),
    matrix=True,
    description="softmax(Q K^T * sm_scale) V over (B, H, S, D) queries and (B, KV, S, D) keys and values "
                "(KV dividing H: grouped- or multi-query), causal or not",
    reference=reference.flash_attention,
    pytorch_op=sdpa,
    make_inputs=attention_inputs,
    smoke_shape={"B": 1, "H": 2, "S": 64, "D": 64, "causal": 0},
    sweep=_shapes([
        (1, 8, 8, 128, 64, 0), (2, 8, 8, 512, 64, 1), (1, 12, 12, 512, 64, 0), (2, 16, 16, 1024, 128, 1),
        (4, 16, 4, 1024, 128, 1), (2, 16, 1, 1024, 128, 0), (1, 8, 8, 1024, 256, 1), (2, 8, 8, 512, 1024, 0),
        (4, 32, 32, 2048, 128, 1)])
    + [{"B": 2, "H": 8, "S": 1024, "D": 64, "causal": 1, "sm_scale": 0.25}],
    cpu_sweep=_shapes([
        (1, 1, 1, 16, 16, 0), (1, 2, 2, 32, 32, 1), (2, 2, 2, 64, 32, 0), (1, 2, 2, 64, 64, 1),
        (1, 1, 1, 128, 16, 1), (1, 4, 2, 48, 32, 1), (2, 3, 1, 40, 16, 0), (1, 2, 1, 24, 256, 1),
        (1, 2, 1, 40, 288, 1)])
    + [{"B": 1, "H": 2, "S": 64, "D": 32, "causal": 0, "sm_scale": 0.25}],
    edge_shapes=_shapes([
        (1, 4, 4, 1023, 64, 1), (1, 2, 2, 4097, 64, 0), (2, 3, 3, 1537, 128, 1), (1, 6, 2, 1023, 96, 1),
        (1, 4, 1, 1537, 192, 0), (1, 1, 1, 1, 64, 0), (3, 1, 1, 1, 128, 1), (1, 3, 1, 1023, 320, 1)]),
    cpu_edge_shapes=_shapes([
        (1, 1, 1, 1023, 16, 1), (1, 1, 1, 1537, 16, 0), (1, 1, 1, 4097, 8, 1), (1, 3, 3, 33, 32, 1),
        (1, 4, 2, 33, 24, 1), (1, 1, 1, 1, 16, 0), (2, 2, 1, 1, 32, 1)]),
    timing_shape={"B": 4, "H": 32, "S": 2048, "D": 128, "causal": 1},
    # Causal and not (an encoder's, a ViT's, cross-attention), multi-head and grouped: a kernel has a path for each,
    # and each must subtract the running max.
    adversarial=[Adversarial(f"large scores{name}", {"B": 1, "H": 2, "S": 256, "D": 64, **shape},
                             lambda s, d, g, dev: attention_inputs(s, d, g, dev, qk_scale=8.0),
                             "q and k scaled by 8: row maxima near 200, exp overflows without max subtraction")
                 for name, shape in (("", {"causal": 1}), (", not causal", {"causal": 0}),
                                     (", grouped heads, not causal", {"H": 4, "KV": 2, "causal": 0}))],
    # q read and the output written (H heads), k and v read once (KV heads).
    bytes_moved=lambda s, e: (2.0 * s["H"] + 2.0 * kv_heads(s)) * s["B"] * s["S"] * s["D"] * e,
    flops=_flops,
    recognise=Recognition(op_shape=op_shape, claims_op=claims_op),
    route=Routing(functions={F.scaled_dot_product_attention: read_attention}),
)
