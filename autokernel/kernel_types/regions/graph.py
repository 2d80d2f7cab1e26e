"""A region's computation as data: its inputs, its ATen ops and its outputs, run by a small interpreter.

A region (autokernel/profile/regions/partition.py) is a piece of a model's captured ATen graph. Its
definition is plain data, written as JSON: each input's shape, strides, dtype and value domain,
each op by name ("aten.sigmoid.default") with its arguments (other nodes by name, numbers,
dtypes, lists), and which nodes are its outputs. The judge's reference for a region is this
definition run op by op (`RegionDefinition.run`): the same ATen ops PyTorch eager runs in the
model, never code from anywhere else, and only ATen and prims ops can be named (ops.resolve). The
oracle is the same run with floating inputs and dtype arguments in float64 (float32 for half types).

A definition is content-addressed: its name is "region_" and the start of the sha256 of its canonical
JSON, so a definition read from a file either is the one a kernel's KERNEL_TYPE names or is refused
(autokernel/kernel_types/regions/store.py).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field

import torch

from autokernel.core.dtypes import DTYPES
from autokernel.kernel_types.regions import ops

PREFIX = "region_"
DIGEST_CHARS = 16
FORMAT = 1
_ALL_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.complex64)}


def torch_dtype(name: str) -> torch.dtype:
    if name not in _ALL_DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return _ALL_DTYPES[name]


@dataclass
class RegionInput:
    """One tensor the region reads: its name (kernel_fn's parameter), layout, dtype and the values it may hold."""
    name: str
    shape: list[int]
    stride: list[int]
    dtype: str
    domain: str = ops.REAL           # ops' domains; "index" for integer indices below index_bound
    index_bound: int | None = None


@dataclass
class RegionNode:
    """One ATen op: its name in the graph, the op, its arguments (encoded: see encode), and its result's layout."""
    name: str
    op: str
    args: list
    kwargs: dict = field(default_factory=dict)
    shape: list[int] | None = None        # None for an op with several results (read by getitem nodes)
    dtype: str | None = None


@dataclass
class RegionDefinition:
    """What a region computes, and nothing about where it came from: the part its name is a digest of."""
    inputs: list[RegionInput]
    nodes: list[RegionNode]
    outputs: list[str]
    adversarial: list[str] = field(default_factory=list)      # the cases of inputs.py the judge uses
    format: int = FORMAT

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RegionDefinition:
        if data.get("format") != FORMAT:
            raise ValueError(f"region format {data.get('format')!r}, this AutoKernel reads {FORMAT}")
        return cls(inputs=[RegionInput(**item) for item in data["inputs"]],
                   nodes=[RegionNode(**item) for item in data["nodes"]], outputs=list(data["outputs"]),
                   adversarial=list(data.get("adversarial", [])), format=data["format"])

    def digest(self) -> str:
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def name(self) -> str:
        return PREFIX + self.digest()[:DIGEST_CHARS]

    @property
    def dtype(self) -> str:
        """The dtype the region is judged in: its first floating output's (else its first floating input's)."""
        by_name = {node.name: node for node in self.nodes}
        for name in self.outputs:
            node = by_name.get(name)
            if node is not None and node.dtype in DTYPES:
                return node.dtype
        return next((i.dtype for i in self.inputs if i.dtype in DTYPES), "float32")

    def output_nodes(self) -> list[RegionNode]:
        by_name = {node.name: node for node in self.nodes}
        return [by_name[name] for name in self.outputs]

    def run(self, inputs: dict, *, oracle: torch.dtype | None = None):
        """The region on these inputs (name -> tensor), op by op; with oracle, floating dtype arguments become it.

        Returns one tensor, or a tuple of them when the region has several outputs."""
        env = {item.name: inputs[item.name] for item in self.inputs}
        device = next((value.device for value in env.values() if isinstance(value, torch.Tensor)), torch.device("cpu"))
        for node in self.nodes:
            target = ops.resolve(node.op)
            args = [decode(arg, env, device, oracle) for arg in node.args]
            kwargs = {key: decode(value, env, device, oracle) for key, value in node.kwargs.items()}
            env[node.name] = target(*args, **kwargs)
        results = tuple(env[name] for name in self.outputs)
        return results[0] if len(results) == 1 else results


# --------------------------------------------------------------------------- arguments as JSON
def encode(value, names: dict) -> object:
    """An FX argument as JSON: another node as {"ref": name} (names maps fx nodes to region names), a float
    that JSON cannot write as {"float": "inf"}, dtypes, devices, layouts and memory formats by name."""
    if isinstance(value, torch.fx.Node):
        if value not in names:
            raise ValueError(f"{value.name} is not a value of the region")
        return {"ref": names[value]}
    if isinstance(value, (list, tuple)):
        return [encode(item, names) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise ValueError(f"a region cannot hold the argument {value!r} ({type(value).__name__})")


def decode(value, env: dict, device: torch.device, oracle: torch.dtype | None):
    """An encoded argument as the op takes it; devices are the inputs' device, and with an oracle dtype every
    floating dtype argument is that dtype."""
    if isinstance(value, list):
        return [decode(item, env, device, oracle) for item in value]
    if not isinstance(value, dict):
        return value
    if "ref" in value:
        return env[value["ref"]]
    if "float" in value:
        return float(value["float"])
    if "dtype" in value:
        dtype = torch_dtype(value["dtype"])
        return oracle if oracle is not None and dtype.is_floating_point else dtype
    if "device" in value:
        return device
    if "layout" in value:
        return getattr(torch, value["layout"])
    if "memory_format" in value:
        return getattr(torch, value["memory_format"])
    raise ValueError(f"a region argument {value!r} is none of the encoded kinds")


def references(value) -> list[str]:
    """The node names an encoded argument refers to."""
    if isinstance(value, list):
        return [name for item in value for name in references(item)]
    if isinstance(value, dict) and "ref" in value:
        return [value["ref"]]
    return []


def layout_of(tensor) -> tuple[list[int], list[int], str]:
    return list(tensor.shape), list(tensor.stride()), str(tensor.dtype).removeprefix("torch.")


__all__ = ["RegionInput", "RegionNode", "RegionDefinition", "encode", "decode", "references", "PREFIX",
           "torch_dtype", "layout_of"]
