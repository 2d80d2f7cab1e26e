"""Region starters made once per test session (Inductor takes seconds per region on a CPU), for the region tests."""

from __future__ import annotations

import functools
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton.jit runs: CPU tensors need the interpreter

import torch  # noqa: E402

from autokernel.kernel_types.regions import store  # noqa: E402
from autokernel.profile.regions import inductor, starter  # noqa: E402
from autokernel.profile.regions.find import find_regions  # noqa: E402
from tests.regions import small_models as models  # noqa: E402

EXAMPLES = {
    "gemm_sigmoid_rowsum": (models.GemmSigmoidRowSum, lambda: (models.rows(),)),
    "tanh_gelu": (models.TanhGelu, lambda: (models.rows(),)),
    "hinge": (models.Hinge, lambda: (models.rows(), models.rows().sign())),
    "log_softmax": (models.LogSoftmax, lambda: (models.rows(),)),
    "cumsum": (models.CumSum, lambda: (models.rows(),)),
}


@functools.lru_cache(maxsize=None)
def made(example: str, folder: str):
    """(region, the starter's path) for one example model, its region saved in folder."""
    make_model, make_inputs = EXAMPLES[example]
    [region] = find_regions(make_model(), make_inputs()).regions
    store.save(region, folder)
    out = inductor.generate(region.definition, torch.device("cpu"))
    path = Path(folder) / f"{example}_starter.py"
    path.write_text(starter.write(region, out.code, out.configs, generated_on=out.device, versions=out.versions))
    return region, path


def starter_for(region, folder: str) -> Path:
    """A starter file for any region (saved in folder, which the store must search)."""
    store.save(region, folder)
    out = inductor.generate(region.definition, torch.device("cpu"))
    path = Path(folder) / f"{region.name}_starter.py"
    path.write_text(starter.write(region, out.code, out.configs, generated_on=out.device, versions=out.versions))
    return path


def judged_again(region, ours: str, ours_us: float, inductor_us: float, monkeypatch) -> str:
    """The region's starter made again on the CPU, judged by a stand-in for bench.py that times our variant `ours`
    (a file that defines its kernel, named after it) at ours_us and Inductor's at inductor_us; each judged once."""
    from autokernel.profile.regions import jobs, pick

    marker = {"engine": "def gemm_epilogue(", "depthwise": "def depthwise_plane("}[ours]
    judged = []

    def judge(path, judged_region):        # each file holds one variant
        mine = marker in path.read_text()
        judged.append(ours if mine else "inductor")
        return pick.Verdict("", "PASS", ours_us if mine else inductor_us)
    monkeypatch.setattr(pick, "judge_with_bench", judge)
    store.find(region.name).with_name(f"{region.name}.cpu.starter.py").unlink(missing_ok=True)
    source = jobs.starter_source(region.name, torch.device("cpu"), judged=True)
    assert judged == ["inductor", ours], judged
    return source
