"""Region starters: Inductor's code for a region as a plain kernel file, which computes the region and passes the judge."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from autokernel.agents.tunables import read_tunables
from autokernel.core.kernel_file import import_file
from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.kernel_types import registry
from autokernel.kernel_types.regions import store
from tests.regions.starters import made


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return str(tmp_path_factory.mktemp("regions"))


@pytest.fixture(autouse=True)
def region_folder(folder, monkeypatch):
    monkeypatch.setenv(store.FOLDERS_VARIABLE, folder)


def test_a_starter_is_inductors_kernels_with_their_configs_as_tunables(folder):
    region, path = made("gemm_sigmoid_rowsum", folder)
    source = path.read_text()
    tree = ast.parse(source)
    jitted = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list]
    assert len(jitted) == 2 and jitted[0].startswith("triton_tem_") and jitted[1].startswith("triton_per_")
    assert f'KERNEL_TYPE = "{region.name}"' in source and "def kernel_fn(weight, bias, x):" in source
    tunables, choices = read_tunables(source)
    assert tunables["k1_XBLOCK"] in choices["k1_XBLOCK"] and {"k0_num_warps", "k1_num_stages"} <= set(tunables)
    assert "extern_kernels" not in source and "async_compile" not in source


@pytest.mark.parametrize("example", ["gemm_sigmoid_rowsum", "tanh_gelu", "hinge", "log_softmax", "cumsum"])
def test_a_starter_computes_its_region(folder, example):
    """Each starter computes its region; the scan's carries the combine function Inductor wrote beside its kernel (a
    starter without it failed on an H100: benchmarks/results/2026-11-27_NVIDIA-H100_region_starters)."""
    region, path = made(example, folder)
    module = import_file(path, f"region_starter_{example}")
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 11, "cpu")
    torch.testing.assert_close(module.kernel_fn(**inputs), kt.reference(**inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_a_region_starter_passes_the_judges_five_stages(folder):
    region, path = made("gemm_sigmoid_rowsum", folder)
    result = runner.run_bench(path, shapes=[region.shape()], dtype="float32", timeout_s=300, seed=5,
                              extra_args=["--quick"])
    assert result.correctness == "PASS", result.message
    assert [s["stage"] for s in result.stages] == ["smoke", "shape sweep", "stability", "determinism",
                                                      "edge shapes"]
    assert result.kernel_type == region.name and result.stages[2]["cases"] >= 2


@pytest.mark.slow
def test_the_judge_refuses_another_dtype_than_the_regions(folder):
    region, path = made("tanh_gelu", folder)
    result = runner.run_bench(path, shapes=[region.shape()], dtype="float16", timeout_s=300, seed=5,
                              extra_args=["--quick"])
    assert result.correctness == "FAIL" and "judged in float32 only" in result.message


@pytest.mark.slow
def test_a_kernel_that_rewrites_its_regions_reference_is_refused(folder, tmp_path, monkeypatch):
    # The attack: at import, make the region's reference something easier (here: tanh for its first op),
    # keeping the file's name. Without Landlock the write succeeds; the judge refuses the file, whose
    # definition no longer has the digest its name says. (Under Landlock the write itself is refused.)
    region, path = made("tanh_gelu", folder)
    region_file = Path(folder) / f"{region.name}.json"          # the judge's folder (AUTOKERNEL_REGION_DIRS)
    attack = tmp_path / "kernel.py"
    attack.write_text(path.read_text().replace("\nimport os\n", f'''
import json
import os
_file = {str(region_file)!r}
_data = json.load(open(_file))
_data["definition"]["nodes"][0]["op"] = "aten.tanh.default"
open(_file, "w").write(json.dumps(_data))
''', 1))
    original = region_file.read_text()
    monkeypatch.setenv(CONFINE_ENV, "0")
    monkeypatch.setenv("AUTOKERNEL_SOURCE_CHECK", "0")     # it opens files: the check behind the source check
    try:
        result = runner.run_bench(attack, shapes=[region.shape()], dtype="float32", timeout_s=300, seed=5,
                                  extra_args=["--quick"])
    finally:
        region_file.write_text(original)
    assert result.correctness == "CRASH" and "changed after it was written" in result.message


def test_a_gemm_templates_tiles_are_tunables_and_any_choice_computes_the_region(folder):
    from autokernel.agents.tunables import rewrite_tunables

    region, path = made("gemm_sigmoid_rowsum", folder)
    source = path.read_text()
    tunables, choices = read_tunables(source)
    assert {"k0_BLOCK_M", "k0_BLOCK_N", "k0_BLOCK_K", "k0_GROUP_M"} <= set(tunables)
    assert "BLOCK_M : tl.constexpr = " not in source and choices["k0_BLOCK_K"] == [16, 32]      # K = 32: unmasked
    changed = path.with_name("gemm_retiled.py")
    changed.write_text(rewrite_tunables(source, {**tunables, "k0_BLOCK_M": 32, "k0_BLOCK_N": 16, "k0_BLOCK_K": 16,
                                                 "k0_GROUP_M": 1}))
    module = import_file(changed, "region_starter_retiled")
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 12, "cpu")
    torch.testing.assert_close(module.kernel_fn(**inputs), kt.reference(**inputs), rtol=1e-4, atol=1e-5)


def test_a_reducing_regions_job_starter_holds_inductors_other_ways_and_each_computes_the_region(folder):
    from autokernel.agents.tunables import rewrite_tunables
    from autokernel.profile.regions import jobs

    region, _ = made("log_softmax", folder)
    store.add_folder(folder)
    source = jobs.starter_source(region.name, torch.device("cpu"), variants=True)
    tunables, choices = read_tunables(source)
    assert tunables["variant"] == "inductor" and choices["variant"][0] == "inductor"
    assert len(choices["variant"]) >= 2, "persistent reductions off gives other code for rows of 32"
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 13, "cpu")
    for index, variant in enumerate(choices["variant"]):
        path = folder + f"/log_softmax_{variant}.py"
        open(path, "w").write(rewrite_tunables(source, {**tunables, "variant": variant}))
        module = import_file(path, f"region_starter_variant_{index}")
        torch.testing.assert_close(module.kernel_fn(**inputs), kt.reference(**inputs), rtol=1e-4, atol=1e-5)


def test_finding_inductors_module_reads_python_sources_alone(tmp_path, monkeypatch):
    """The loaded module Inductor ran is found among every module by its source; an extension module (a .so, no text)
    is passed over. Reading one as UTF-8 cost the tanh-GELU region its starter on an H100 (UnicodeDecodeError)."""
    import sys
    import types

    from autokernel.profile.regions import inductor

    binary, code = tmp_path / "ext.cpython-311-x86_64-linux-gnu.so", "def kernel():\n    return 1\n"
    binary.write_bytes(bytes(range(256)) * 4)                    # not UTF-8 from its first high byte
    python_file = tmp_path / "inductor_output.py"
    python_file.write_text(code)
    extension, output = types.ModuleType("ext_module"), types.ModuleType("inductor_output")
    extension.__file__, output.__file__ = str(binary), str(python_file)
    output.kernel = types.SimpleNamespace(launchers=[types.SimpleNamespace(
        config=types.SimpleNamespace(kwargs={"XBLOCK": 64}, num_warps=4, num_stages=1))])
    monkeypatch.setitem(sys.modules, "inductor_output", output)
    monkeypatch.setitem(sys.modules, "ext_module", extension)         # later in sys.modules: read first
    assert inductor._chosen_configs(code) == {"kernel": {"XBLOCK": 64, "num_warps": 4, "num_stages": 1}}
    assert inductor._chosen_configs("code no module has") == {}


def test_a_region_that_reads_no_tensor_gets_no_starter():
    from autokernel.kernel_types.regions.graph import RegionDefinition, RegionNode
    from autokernel.kernel_types.regions.record import Region
    from autokernel.profile.regions import starter
    from autokernel.profile.regions.starter_code import StarterError

    arange = RegionNode("n0", "aten.arange.default", [8], {"device": {"device": "cpu"}}, [8], "int64")
    with pytest.raises(StarterError, match="reads no tensor"):
        starter.write(Region(RegionDefinition([], [arange], ["n0"])), "", generated_on="cpu", versions="")


def test_a_starter_cache_cut_short_is_not_left_to_be_read_as_whole(tmp_path, monkeypatch):
    # A later call reads the cache file whenever it exists (jobs.starter_source): a full disk mid-write must leave none.
    from autokernel.profile.regions import jobs

    real_write = Path.write_text

    def half_then_full_disk(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2])
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(Path, "write_text", half_then_full_disk)
    cache = tmp_path / "region_x.cpu.starter.py"
    with pytest.raises(OSError):
        jobs._write_whole(cache, "KERNEL_TYPE = 'region_x'\n" * 10)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(Path, "write_text", real_write)
    jobs._write_whole(cache, "whole\n")
    assert cache.read_text() == "whole\n" and list(tmp_path.iterdir()) == [cache]
