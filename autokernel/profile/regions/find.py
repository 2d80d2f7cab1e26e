"""The regions of a model: captured, partitioned, merged where the model repeats one, with inputs settled.

`find_regions` is what the profiler calls: it captures the model on its inputs (capture.py), cuts
every graph into regions (partition.py), leaving the menu its modules and lone ops, merges identical
definitions into one region with several instances, and fixes each region's input domains and
adversarial cases by running its reference once (inputs.py). A region the judge could not check
(inputs that share memory, a result that is not finite) is left out, and the reason is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from autokernel.kernel_types.regions.capture import capture
from autokernel.kernel_types.regions.inputs import overlapping, settle_domains, usable_cases
from autokernel.kernel_types.regions.record import Region, RegionAbout
from autokernel.profile.regions.menu import claimed, menu_call
from autokernel.profile.regions.partition import Found, partition


@dataclass
class FoundRegions:
    regions: list[Region] = field(default_factory=list)
    # region name -> the menu's (type, shape) calls it took, per instance (a GEMM head, a sum in an epilogue)
    taken: dict[str, list[tuple[str, dict]]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    graphs: int = 0


def find_regions(model: nn.Module, inputs: tuple, *, name: str = "model",
                 excluded: Callable[[str], bool] = lambda path: False) -> FoundRegions:
    """Every region of the model's forward on these inputs, most instances first."""
    device = next((t.device for t in (*model.parameters(), *inputs) if isinstance(t, torch.Tensor)),
                  torch.device("cpu"))
    found = FoundRegions()
    graphs = capture(model, inputs)
    found.graphs = len(graphs)
    by_name: dict[str, Region] = {}
    for graph in graphs:
        cut = partition(graph, excluded=excluded, claimed=claimed)
        found.skipped += cut.skipped
        for piece in cut.found:
            key = piece.definition.name          # before settling, which fills in domains and cases
            region = by_name.get(key)
            if region is None:
                region = _settled(piece, graph.input_names, name, device, found.skipped)
                if region is None:
                    continue
                by_name[key] = region
                found.taken[region.name] = [call for call in map(menu_call, piece.nodes) if call]
            else:
                region.about.instances += 1
                region.about.sources = list(dict.fromkeys(region.about.sources + piece.sources))
    found.regions = sorted(by_name.values(), key=lambda region: -region.about.instances)
    return found


def _settled(piece: Found, input_names: list[str], model_name: str, device, skipped: list[str]) -> Region | None:
    definition = piece.definition
    where = f"{' -> '.join(piece.kinds)} at {piece.sources[0].show() if piece.sources else '?'}"
    if any(overlapping(item) for item in definition.inputs):
        skipped.append(f"{where}: an input's elements share memory (an expanded tensor)")
        return None
    try:
        settle_domains(definition, device)
        definition.adversarial = usable_cases(definition, device)
    except (RuntimeError, ValueError, IndexError) as why:     # its ops cannot run on drawn inputs: not a region
        skipped.append(f"{where}: {str(why).splitlines()[0][:200]}")
        return None
    placeholders = [n for n in piece.nodes[0].graph.nodes if n.op == "placeholder"]
    sources = {item.name: (input_names[placeholders.index(node)] if node in placeholders else
                           f"the value {node.name} computed outside the region")
               for item, node in zip(definition.inputs, piece.inputs)}
    about = RegionAbout(model=model_name, sources=piece.sources, module_paths=piece.module_paths,
                        kinds=piece.kinds, input_sources=sources)
    return Region(definition, about)
