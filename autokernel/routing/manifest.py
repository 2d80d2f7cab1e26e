"""optimized_kernels/manifest.json: the kernels a run kept, where they were verified, and where they win.

The loop (orchestrate.py) writes one entry per finished job: the kernel file, its type and rank,
and the shapes and dtypes bench.py verified it at. verify.py adds each kernel's route table: for
every call signature the model makes, our kernel's time against PyTorch's at that signature, and
whether the call is routed to the kernel eagerly and under torch.compile. plugin.plug_in follows
that table, so a kernel runs only where it was measured faster, on the GPU it was measured on.

    {"kernels": {"1_rmsnorm": {"file": "1_rmsnorm.py", "kernel_type": "rmsnorm", "rank": 1,
                               "shapes": [{"M": 512, "N": 2048}], "dtypes": ["float16"],
                               "route_table": {"source_sha256": "...", "device": "NVIDIA H100 80GB HBM3",
                                               "records": [RouteRecord.to_json(), ...]},
                               ...the loop's own figures...}}}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from autokernel.core import paths
from autokernel.core.contracts import Job, ManifestEntry, PlanEntry

ROUTE_TABLE = "route_table"


class PlugInError(Exception):
    """Optimized kernels cannot be loaded or plugged in; the message says why and what to do."""


@dataclass
class RouteRecord:
    """One kernel at one call signature of the model: our time against PyTorch's there, and the decision.

    Times are microseconds per call. `ours_us` and `pytorch_us` are eager calls timed back to back,
    launch overhead included (what an eager forward pays); `ours_gpu_us` and `compiled_gpu_us` are
    GPU time alone, replayed from a CUDA graph (what a compiled, graph-captured forward pays), the
    latter for torch.compile of PyTorch's own op. None where not measured (no GPU, or it failed).
    """
    shape: dict
    dtype: str
    site: str                          # what PyTorch runs there: "module layers.0.mlp (SwiGLU)" or a function
    calls: int                         # calls per forward pass with this signature
    ours_us: float | None = None
    pytorch_us: float | None = None
    ours_gpu_us: float | None = None
    compiled_gpu_us: float | None = None
    route_eager: bool = False
    route_compiled: bool = False
    why: str = ""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RouteRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def key(self) -> tuple[str, str]:
        return shape_key(self.shape), self.dtype


def shape_key(shape: dict) -> str:
    """A shape dict as a stable, hashable string (the route table's key)."""
    return json.dumps(shape, sort_keys=True)


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def manifest_entry(job: Job | PlanEntry, file: str | Path) -> dict:
    """The manifest entry load_kernels reads for one kernel, from its job (or a plan entry, for its starter).

    `file` is relative to the manifest's folder, or absolute; the shapes and the dtype are those
    bench.py verified the kernel at.
    """
    return ManifestEntry.for_job(job, str(file)).to_json()


def read_manifest(manifest_path: Path) -> dict[str, dict]:
    """The manifest's kernels, name -> entry; PlugInError when it is missing or not a manifest."""
    if not manifest_path.is_file():
        raise PlugInError(f"no optimized kernels: {manifest_path} does not exist; run `autokernel optimize` "
                          f"first, or point at the folder that holds {paths.MANIFEST_NAME}. A run saves a kernel "
                          "only where it beats PyTorch's best: after a run that saved none, the model is fastest "
                          "as PyTorch runs it (`verify MODEL --starters` times PyTorch's paths beside the starters)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise PlugInError(f"{manifest_path} is not valid JSON ({exc})") from exc
    entries = manifest.get("kernels") if isinstance(manifest, dict) else None
    if not isinstance(entries, dict):
        raise PlugInError(f"{manifest_path} has no \"kernels\" object, so it is not a manifest orchestrate.py wrote")
    return entries


def write_manifest(manifest_path: Path, entries: dict[str, dict]) -> None:
    """Write the manifest listing these kernels (name -> entry), making its folder; atomic (a kill leaves the old one)."""
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    partial = manifest_path.with_suffix(".json.partial")
    partial.write_text(json.dumps({"kernels": entries}, indent=2) + "\n")
    partial.replace(manifest_path)


def route_records(entry: dict, source_sha256: str, device: str) -> list[RouteRecord]:
    """The entry's route table, if it was measured for this source on this device; else none."""
    table = entry.get(ROUTE_TABLE)
    if not isinstance(table, dict) or table.get("source_sha256") != source_sha256 or table.get("device") != device:
        return []
    return [RouteRecord.from_json(record) for record in table.get("records", []) if isinstance(record, dict)]


def write_route_tables(manifest_path: Path, tables: dict[str, tuple[str, str, list[RouteRecord]]]) -> None:
    """Store route tables into the manifest: kernel name -> (source sha256, device, records)."""
    entries = read_manifest(manifest_path)
    for name, (sha, device, records) in tables.items():
        if name in entries:
            entries[name][ROUTE_TABLE] = {"source_sha256": sha, "device": device,
                                          "records": [record.to_json() for record in records]}
    write_manifest(manifest_path, entries)
