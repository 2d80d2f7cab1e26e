"""Tests for autokernel/routing/manifest.py: the manifest's entries, its route tables, and clear errors for bad
folders."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.core.contracts import Job  # noqa: E402
from autokernel.core.paths import MANIFEST_NAME, starter_path  # noqa: E402
from autokernel.routing import manifest, plugin  # noqa: E402
from autokernel.routing.manifest import PlugInError, RouteRecord  # noqa: E402
from tests.test_plugin import reference_kernel, reference_sources, write_optimized  # noqa: E402


def test_manifest_entry_from_a_job_loads_the_file_it_names(tmp_path):
    job = Job(rank=3, kernel_type="softmax", shapes=[{"M": 4, "N": 64}], dtype="float16", share=0.2, path="k.py")
    manifest.write_manifest(tmp_path / "opt" / MANIFEST_NAME,
                            {"3_softmax": manifest.manifest_entry(job, starter_path("softmax"))})
    assert manifest.read_manifest(tmp_path / "opt" / MANIFEST_NAME) == {"3_softmax": {
        "file": str(starter_path("softmax")), "kernel_type": "softmax", "rank": 3, "shapes": [{"M": 4, "N": 64}],
        "dtypes": ["float16"]}}
    (kernel,) = plugin.load_kernels(tmp_path / "opt")
    # An absolute file is used as it is, not looked for in the manifest's folder.
    assert (kernel.name, kernel.file, kernel.rank) == ("3_softmax", starter_path("softmax"), 3)
    assert kernel.covers({"M": 4, "N": 64}, torch.float16) and not kernel.covers({"M": 4, "N": 64}, torch.float32)


def test_bad_optimized_folders_give_clear_errors(tmp_path):
    with pytest.raises(PlugInError, match="manifest.json does not exist"):
        plugin.load_kernels(tmp_path / "nothing")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(PlugInError, match="is not valid JSON"):
        plugin.load_kernels(tmp_path / "broken")
    (tmp_path / "broken" / MANIFEST_NAME).write_text(json.dumps({"1_softmax": {}}))
    with pytest.raises(PlugInError, match='no "kernels" object'):
        plugin.load_kernels(tmp_path / "broken")
    wrong_type = write_optimized(tmp_path / "wrong", {"softmax": [{"M": 1, "N": 1}]},
                                 sources={"softmax": reference_kernel("rmsnorm")})
    with pytest.raises(PlugInError, match="KERNEL_TYPE 'rmsnorm'"):
        plugin.load_kernels(wrong_type)
    bad_dtype = write_optimized(tmp_path / "dtype", {"softmax": [{"M": 1, "N": 1}]}, dtypes=("fp8",),
                                sources=reference_sources("softmax"))
    with pytest.raises(PlugInError, match="unknown dtypes"):
        plugin.load_kernels(bad_dtype)


def test_route_tables_are_written_into_the_manifest_and_read_back(tmp_path):
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 8}]}, sources=reference_sources("softmax"))
    entries_before = manifest.read_manifest(folder / MANIFEST_NAME)
    record = RouteRecord(shape={"M": 4, "N": 8}, dtype="float32", site="torch.softmax", calls=2, ours_us=3.0,
                         pytorch_us=4.5, ours_gpu_us=1.0, compiled_gpu_us=1.1, route_eager=True, route_compiled=False,
                         why="eager: faster: 1.50x")
    manifest.write_route_tables(folder / MANIFEST_NAME, {"1_softmax": ("abc", "NVIDIA H100", [record])})
    entry = manifest.read_manifest(folder / MANIFEST_NAME)["1_softmax"]
    # The loop's own fields stay; the table sits beside them.
    assert {k: v for k, v in entry.items() if k != manifest.ROUTE_TABLE} == entries_before["1_softmax"]
    assert manifest.route_records(entry, "abc", "NVIDIA H100") == [record]
    assert manifest.route_records(entry, "abc", "NVIDIA A100") == []
    assert manifest.route_records(entry, "xyz", "NVIDIA H100") == []
    # A record from a newer version with a field this one does not know still loads.
    assert RouteRecord.from_json({**record.to_json(), "added_later": 1}) == record
    assert record.key() == ('{"M": 4, "N": 8}', "float32")


def test_the_manifest_is_replaced_whole(tmp_path):
    # Written to a side file and renamed: a kill mid-write leaves the old manifest, never half of one.
    path = tmp_path / MANIFEST_NAME
    manifest.write_manifest(path, {"a": {"x": 1}})
    manifest.write_manifest(path, {"b": {"x": 2}})
    assert manifest.read_manifest(path) == {"b": {"x": 2}}
    assert [p.name for p in tmp_path.iterdir()] == [MANIFEST_NAME]


def test_a_missing_manifest_says_what_a_run_that_saved_nothing_means(tmp_path):
    with pytest.raises(PlugInError) as error:
        manifest.read_manifest(tmp_path / "optimized_kernels" / "manifest.json")
    assert "does not exist" in str(error.value) and "saved none" in str(error.value) and "--starters" in str(error.value)
