"""A region as the plan, the store and the judge know it: its definition, and where in the model it came from.

The definition (graph.py) is what the region computes and what its name is a digest of; `RegionAbout`
is what a person or an LLM reads about it: the model's source lines it covers, the modules it sits in,
the kinds of ops, how many times the model runs it, and what each input is in the model. Both are
written to one JSON file (autokernel/kernel_types/regions/store.py); only the definition is checked against the name.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from autokernel.core.contracts import titled
from autokernel.kernel_types.regions.capture import SourceLine
from autokernel.kernel_types.regions.graph import RegionDefinition


@dataclass
class RegionAbout:
    model: str = "unknown"
    sources: list[SourceLine] = field(default_factory=list)
    module_paths: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    instances: int = 1                                   # times one forward pass runs it
    input_sources: dict[str, str] = field(default_factory=dict)     # input name -> what it is in the model

    def to_json(self) -> dict:
        data = asdict(self)
        data["sources"] = [asdict(line) for line in self.sources]
        return data

    @classmethod
    def from_json(cls, data: dict) -> RegionAbout:
        data = dict(data)
        data["sources"] = [SourceLine(**line) for line in data.get("sources", [])]
        return cls(**data)


@dataclass
class RegionEntry:
    """What a plan entry of a region says of it (PlanEntry.extra["region"]): its ops, kinds and instances, the model's
    source lines it covers, and what each input is in the model."""
    ops: list[str]
    kinds: list[str]
    instances: int
    sources: list[str]
    inputs: dict[str, str] = field(default_factory=dict)
    takes: list[list] = field(default_factory=list)     # [menu type, its shape] of each menu call it took

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RegionEntry:
        missing = [name for name in ("ops", "kinds", "instances", "sources") if name not in data]
        if missing:
            raise ValueError(f"a region's plan entry needs {', '.join(missing)}")
        return cls(**{key: data[key] for key in ("ops", "kinds", "instances", "sources", "inputs", "takes")
                      if key in data})


# The GEMMs a region may start with, as its title says them (the ops' own names differ: addmm, mm, bmm...).
GEMM_OPS = {"addmm", "mm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "_addmm_activation"}


def region_title(ops: list[str]) -> str:
    """A region's ops as its title, "gemm+sigmoid+sum" (a GEMM by any of its names is "gemm"); "" for none."""
    return "+".join(dict.fromkeys("gemm" if op in GEMM_OPS else op for op in ops))


@dataclass
class Region:
    definition: RegionDefinition
    about: RegionAbout = field(default_factory=RegionAbout)

    @property
    def name(self) -> str:
        return self.definition.name

    def to_json(self) -> dict:
        return {"name": self.name, "definition": self.definition.to_json(), "about": self.about.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> Region:
        region = cls(RegionDefinition.from_json(data["definition"]), RegionAbout.from_json(data.get("about", {})))
        if data.get("name") != region.name:
            raise ValueError(f"the region file names {data.get('name')!r}, but its definition is {region.name!r}: "
                             "it was changed after it was written")
        return region

    def shape(self) -> dict:
        """The region's one shape, as plans and bench.py's --shape write shapes: each input's sizes ("64x32"; a
        1-D input's size a number, as registry.parse_shape reads it back; "scalar" for a 0-D one)."""
        return {item.name: item.shape[0] if len(item.shape) == 1 else "x".join(map(str, item.shape)) or "scalar"
                for item in self.definition.inputs}

    def ops(self) -> list[str]:
        """Its compute ops, in order, without repeats: ["addmm", "sigmoid", "sum"]."""
        from autokernel.kernel_types.regions import ops

        names = [ops.packet(node.op) for node in self.definition.nodes
                 if ops.kind(ops.resolve(node.op)) != ops.VIEW]
        return list(dict.fromkeys(names))

    @property
    def label(self) -> str:
        """The region as people read it, its ops first: "gemm+sigmoid+sum (region_3f9a0c1d2e)"."""
        return titled(self.name, region_title(self.ops()))

    def describe(self) -> str:
        outputs = ", ".join(f"{tuple(n.shape)} {n.dtype}" for n in self.definition.output_nodes())
        inputs = ", ".join(f"{i.name} {tuple(i.shape)} {i.dtype}" for i in self.definition.inputs)
        return f"a region of {self.about.model}: {' -> '.join(self.ops())}; reads {inputs}; writes {outputs}"

    def source_text(self) -> str:
        """The PyTorch source lines it covers, one per line."""
        return "\n".join(line.show() for line in self.about.sources) or "(no source line recorded)"

    def entry(self) -> RegionEntry:
        return RegionEntry(self.ops(), self.about.kinds, self.about.instances,
                           [line.show() for line in self.about.sources], self.about.input_sources)

    def output_elements(self) -> int:
        return sum(math.prod(n.shape) for n in self.definition.output_nodes())
