"""Region files: written, read back by name, refused when changed; the registry finds a region through them."""

from __future__ import annotations

import json

import pytest
import torch

from autokernel.judge.correctness import reference_outputs
from autokernel.kernel_types import registry
from autokernel.kernel_types.regions import store
from autokernel.profile.regions.find import find_regions
from tests.regions import small_models as models


@pytest.fixture
def region_folder(tmp_path, monkeypatch):
    folder = tmp_path / "regions"
    monkeypatch.setenv(store.FOLDERS_VARIABLE, str(folder))
    return folder


def gemm_region():
    [region] = find_regions(models.GemmSigmoidRowSum(), (models.rows(),)).regions
    return region


def test_a_region_file_round_trips_and_the_registry_finds_it(region_folder):
    region = gemm_region()
    path = store.save(region, region_folder)
    assert path.name == f"{region.name}.json"
    loaded = store.load(region.name)
    assert loaded.to_json() == region.to_json()
    kt = registry.get(region.name)
    assert kt.name == region.name and kt.dtypes == ("float32",) and kt.matrix
    assert list(kt.smoke_shape) == ["weight", "bias", "x"] and kt.smoke_shape["x"] == "8x32"
    assert "sigmoid" in kt.source and registry.known(region.name)


def test_a_changed_region_file_is_refused(region_folder):
    region = gemm_region()
    path = store.save(region, region_folder)
    data = json.loads(path.read_text())
    data["definition"]["nodes"][2]["op"] = "aten.tanh.default"       # sigmoid -> tanh, the name kept
    tampered = region_folder / "elsewhere"
    tampered.mkdir()
    (tampered / path.name).write_text(json.dumps(data))
    with pytest.raises(ValueError, match="definition is"):
        store._load(region.name, tampered / path.name)


def test_an_unknown_region_is_a_key_error(region_folder):
    with pytest.raises(KeyError, match="no region file"):
        registry.get("region_0000000000000000")
    assert not registry.known("region_0000000000000000")


def test_the_reference_and_its_oracle_follow_the_judge(region_folder):
    region = gemm_region()
    store.save(region, region_folder)
    kt = registry.get(region.name)
    inputs = kt.inputs(kt.smoke_shape, torch.float32, 7, "cpu")
    assert {name: tuple(t.shape) for name, t in inputs.items()} == {"weight": (48, 32), "bias": (48,), "x": (8, 32)}
    expected, oracle, _ = reference_outputs(kt, inputs, torch.float32)
    assert expected.dtype == torch.float32 and oracle.dtype == torch.float64
    torch.testing.assert_close(oracle.float(), expected, rtol=1e-5, atol=1e-5)
    again = kt.inputs(kt.smoke_shape, torch.float32, 7, "cpu")
    assert all(torch.equal(inputs[name], again[name]) for name in inputs)


def test_adversarial_inputs_stay_in_the_domain(region_folder):
    [region] = find_regions(models.LogOfSum(), (models.rows().abs() + 0.1,)).regions
    store.save(region, region_folder)
    kt = registry.get(region.name)
    assert {"wide range", "tiny values"} <= {case.name for case in kt.adversarial}
    for case in kt.adversarial:
        gen = torch.Generator().manual_seed(3)
        x = case.make_inputs(case.shape, torch.float32, gen, "cpu")["x"]
        assert bool((x > 0).all()), case.name
        assert torch.isfinite(kt.reference(x=x)).all()


def test_the_llm_prompt_of_a_region_job_gives_its_source_lines_its_ops_and_its_share(region_folder):
    from autokernel.agents.base import AgentContext
    from autokernel.agents.prompt import build_messages

    region = gemm_region()
    store.save(region, region_folder)
    job = {"rank": 1, "kernel_type": region.name, "shapes": [region.shape()], "dtype": "float32", "share": 0.42,
           "amdahl_2x": 1.27}
    context = AgentContext(kernel_type=region.name, kernel_source=f'KERNEL_TYPE = "{region.name}"\n', last_result=None,
                           history=[], best_versions=[], program="PLAYBOOK", job=job)
    user = build_messages(context).user
    assert "torch.sigmoid(self.linear(x)).sum(dim=1, keepdim=True)" in user        # the model's own source line
    assert "aten.addmm.default" in user and "aten.sigmoid.default" in user         # the ops the reference runs
    assert "42.0% of the model's profiled time" in user and "Inductor generated for it" in user
