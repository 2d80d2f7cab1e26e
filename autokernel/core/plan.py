"""The optimization plan: what profile.py writes (workspace/optimization_plan.json) and extract, verify and the
live view read. One record from the profiler to its readers; JSON only at the file.

A plan is the model's measured time split into kernel entries (the menu's types and the model's regions, by
rank, each a PlanEntry) and the rest, `other_ms`, which no kernel names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from autokernel.core.contracts import ContractError, PlanEntry, check_keys

OTHER = "other"        # the time no kernel type names: the profiler's label for it, the plan's other_ms


class PlanError(Exception):
    """The plan file is missing or not a plan; the message says what to do."""


@dataclass
class Plan:
    """Where one model spends its time, by kernel entry, as measured on one device in one dtype."""
    model: str
    device: str                      # "cuda" or "cpu": what the times were measured on
    dtype: str
    entries: list[PlanEntry]         # by rank, most time first
    total_ms: float = 0.0            # one forward pass, as the profiler attributed it
    other_ms: float = 0.0            # the part no entry names
    device_name: str = "?"
    gpu: str | None = None           # the GPU whose roofline placed the entries (hardware.GPUSpec.name)
    inputs: list | None = None       # the inputs profiled (profiler.describe_inputs); older plans have none
    timing: str = "measured time"
    wall_ms: float | None = None
    coverage: float | None = None
    regions: dict | None = None      # what the region finder found, or why it could not look
    caveats: list[str] = field(default_factory=list)   # what a reader must know of these times (on a CPU, noisy...)
    extra: dict = field(default_factory=dict)    # a newer writer's keys, written back unchanged

    @property
    def other_share(self) -> float:
        return self.other_ms / self.total_ms if self.total_ms > 0 else 0.0

    def shares(self) -> dict[str, float]:
        """Each entry's share of the measured time, by kernel type."""
        return {entry.kernel_type: entry.share for entry in self.entries}

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("entries", "other_ms", "extra")}
        data["entries"] = [entry.to_json() for entry in self.entries]
        data["other"] = {"time_ms": self.other_ms, "share": self.other_share}
        if self.regions is None:
            del data["regions"]
        return {**data, **self.extra}

    @classmethod
    def from_json(cls, data: dict) -> Plan:
        """The plan in data; ContractError says what is missing or malformed."""
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            raise ContractError("a Plan is a JSON object with an \"entries\" list; this has no \"entries\" list")
        check_keys(cls, data)
        if not all(isinstance(entry, dict) for entry in data["entries"]):
            raise ContractError("a Plan's entries are JSON objects")
        entries = [PlanEntry.from_json(entry) for entry in data["entries"]]
        other_ms = data["other"].get("time_ms", 0.0) if isinstance(data.get("other"), dict) else 0.0
        known = {f.name for f in fields(cls)} - {"entries", "other_ms", "extra"}
        return cls(entries=sorted(entries, key=lambda entry: entry.rank), other_ms=other_ms,
                   **{key: value for key, value in data.items() if key in known},
                   extra={key: value for key, value in data.items() if key not in known | {"entries", "other"}})


def read_plan(plan_path: str | Path) -> Plan:
    """The plan in the file; PlanError, saying what to do, when there is none or it is not one."""
    path = Path(plan_path)
    if not path.is_file():
        raise PlanError(f"no plan at {path}: run `python profile.py MODEL` first")
    try:
        return Plan.from_json(json.loads(path.read_text()))
    except json.JSONDecodeError as error:
        raise PlanError(f"{path} is not valid JSON ({error}); run profile.py again") from error
    except ContractError as error:
        raise PlanError(f"{path} is not an optimization plan ({error}); run profile.py again") from error


def write_plan(plan: Plan, plan_path: str | Path) -> Path:
    path = Path(plan_path)
    path.write_text(json.dumps(plan.to_json(), indent=2) + "\n")
    return path
