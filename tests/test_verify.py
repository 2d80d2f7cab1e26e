"""Tests for verify.py: the end-to-end check passes with the real starter kernels, fails on a wrong one, and reports.

On the CPU nothing is routed by measurement (the interpreter's timings mean nothing), so the
AutoKernel variants run with --route all where a test needs them; the correctness check always
routes every verified call.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import json  # noqa: E402
import re  # noqa: E402
import textwrap  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.routing.manifest import read_manifest, write_manifest  # noqa: E402
from autokernel.verify import verify_command as verify  # noqa: E402
from autokernel.core import hardware  # noqa: E402
from autokernel.core.paths import MANIFEST_NAME, ROOT, starter_path  # noqa: E402
from autokernel.core.plan import Plan  # noqa: E402
from autokernel.profile import models, profiler  # noqa: E402
from autokernel.profile.profiler import PLAN_FILE  # noqa: E402
from autokernel.verify import verification  # noqa: E402
from autokernel.verify.verification import (EXIT_ERROR, EXIT_FAIL, EXIT_NOTHING_CHECKED, EXIT_PASS, REPORT_FILE,
                                            STARTER_MANIFEST_DIR, NothingToPlugIn)
from tests.test_plugin import LLAMA_SHAPES, reference_kernel, write_optimized  # noqa: E402

TINY_LLAMA_ARGS = [str(ROOT / "models" / "llama.py"), "--input-shape", "1,8", "--device", "cpu",
                   "--model-arg", "config=tiny", "--model-arg", "n_layers=1", "--model-arg", "vocab_size=128"]
SECONDS = r"\d+\.\d s"
SOFTMAX_MODEL = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1)


def get_model():
    return Model()


def get_inputs():
    return [torch.randn(4, 16)]
'''


def read_report(workspace) -> dict:
    return json.loads((workspace / REPORT_FILE).read_text())


@pytest.mark.slow
def test_tiny_llama_with_the_starter_kernels_passes(tmp_path, capsys):
    folder = write_optimized(tmp_path / "opt", LLAMA_SHAPES)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "optimization_plan.json").write_text(json.dumps({
        "model": "llama.py:Model", "device": "cpu", "dtype": "float32", "timing": "CPU op time", "device_name": "cpu",
        "entries": [{"rank": rank, "kernel_type": kernel_type, "dtype": "float32", "shapes": [], "share": share,
                     "amdahl_2x": 1 / (1 - share / 2)}
                    for rank, (kernel_type, share) in enumerate((("matmul", 0.5), ("rmsnorm", 0.1),
                                                                  ("rotary_embedding", 0.05)), start=1)]}))

    code = verify.main([*TINY_LLAMA_ARGS, "--optimized-dir", str(folder), "--workspace", str(workspace),
                        "--no-compile", "--route", "all"])

    assert code == EXIT_PASS
    report = read_report(workspace)
    check = report["correctness"]
    assert check["passed"] and check["max_error"] <= 1e-4 and check["variant_max_error"] <= 1e-4
    assert check["tolerance"] == 1e-4
    kernels = {k["kernel_type"]: k for k in report["kernels"]}
    assert {t: (k["hits"], k["fallbacks"]) for t, k in kernels.items()} == {
        "rmsnorm": (3, 0), "matmul": (5, 0), "flash_attention": (1, 0), "fused_mlp": (1, 0),
        "rotary_embedding": (2, 0)}
    assert kernels["matmul"]["share"] == 0.5 and kernels["fused_mlp"]["share"] is None
    assert report["replaced_share"] == pytest.approx(0.65)
    assert set(report["variants"]) == {"eager", "ours"} and report["variants"]["ours"]["ms"] > 0
    assert report["timings_meaningful"] is False and not report["verdict"]["faster"]
    assert report["verdict"]["summary"].startswith("no speed verdict")
    # The route table lists every signature the kernels met, with the calls per forward, and the rewrites (off under
    # "all": autokernel/verify/rewrites.py): q, k and v, and gate and up, each read one input.
    assert {(row["kernel"], row["calls"]) for row in report["route_table"]} == {
        ("1_rmsnorm", 3), ("2_matmul", 4), ("2_matmul", 1), ("3_flash_attention", 1), ("4_fused_mlp", 1),
        ("5_rotary_embedding", 2), ("linear concatenation", 2)}
    assert report["versions"]["torch"] == torch.__version__ and report["inputs"] == [{"shape": [1, 8],
                                                                                       "dtype": "int64"}]
    out = capsys.readouterr().out
    assert "NOT MEANINGFUL" in out and "PASS" in out and "Route table" in out
    # Captured output is no terminal: the tables are written whole, no cell cut to fit 80 columns.
    assert "…" not in out and "module layers.0" in out


@pytest.mark.slow
def test_starters_verify_the_current_kernels_at_the_shapes_of_a_fresh_plan(tmp_path, capsys):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # The plan of another dtype is not this model's: the model is profiled again.
    (workspace / PLAN_FILE).write_text(json.dumps({"model": "llama.py:Model", "device": "cpu", "dtype": "float16",
                                                   "entries": [{"kernel_type": "softmax", "rank": 1, "dtype": "float16",
                                                                "shapes": [{"M": 8, "N": 100}], "share": 0.5,
                                                                "amdahl_2x": 1.33}]}))

    code = verify.main([*TINY_LLAMA_ARGS, "--starters", "--workspace", str(workspace), "--no-compile"])

    assert code == EXIT_PASS
    plan = json.loads((workspace / PLAN_FILE).read_text())
    assert (plan["model"], plan["device"], plan["dtype"]) == ("llama.py:Model", "cpu", "float32")
    manifest = read_manifest(workspace / STARTER_MANIFEST_DIR / MANIFEST_NAME)
    # A region's starter is Inductor's code for it, written beside the manifest (autokernel/profile/regions/jobs.py) and
    # named relative to it: the sandboxed child made it in a folder of its own, and this process copied it here.
    starters = workspace / STARTER_MANIFEST_DIR
    assert manifest == {f"{e['rank']}_{e['kernel_type']}": {
        "file": f"{e['kernel_type']}.py" if e["kernel_type"].startswith("region_") else str(starter_path(e["kernel_type"])),
        "kernel_type": e["kernel_type"], "rank": e["rank"], "shapes": e["shapes"], "dtypes": ["float32"]}
        for e in plan["entries"]}
    regions = [e["kernel_type"] for e in plan["entries"] if e["kernel_type"].startswith("region_")]
    assert regions and all((starters / f"{name}.py").is_file() and (starters / "regions" / f"{name}.json").is_file()
                           for name in regions)
    # The plan's regions are in the workspace beside it, for the next verify there, which reuses the plan.
    assert all((workspace / "regions" / f"{name}.json").is_file() for name in regions)
    report = read_report(workspace)
    assert report["correctness"]["passed"] and report["plan"].endswith("profiled now")
    assert report["optimized_dir"] == str(workspace / STARTER_MANIFEST_DIR)
    # The plan's shapes are the model's: every planned kernel takes every call of its type in the check.
    assert [(k["kernel_type"], k["fallbacks"]) for k in report["checked"]["kernels"]] == [
        (e["kernel_type"], 0) for e in plan["entries"]]
    # Every menu kernel takes calls; a region is found where its inputs keep their layout (one that reads what a menu
    # kernel routed in front of it returned, in other strides, is not: its kernel was judged at the model's).
    assert all(k["hits"] > 0 for k in report["checked"]["kernels"] if not k["kernel_type"].startswith("region_"))
    assert any(k["hits"] > 0 for k in report["checked"]["kernels"] if k["kernel_type"].startswith("region_"))
    # Measured on no GPU, nothing routes in the AutoKernel variants: PyTorch's path is handed over.
    assert all(k["hits"] == 0 for k in report["kernels"]) and report["replaced_share"] == 0
    assert report["variants"]["ours"]["failed"].startswith("nothing routed")
    out = capsys.readouterr().out
    assert "profiling llama.py:Model first" in out and "PASS" in out
    # The phase before the comparison says where its time went: the profile's parts, then the starters' (a region's
    # is Inductor's code, made here).
    count = r"( \(\d+x\))?"
    assert re.search(rf"profiled in {SECONDS} \(torch profiler {SECONDS}, regions {SECONDS}, region capture {SECONDS}, "
                     rf"region timing {SECONDS}{count}\)", out)
    assert re.search(rf"starters made in {SECONDS} \(region starters {SECONDS}{count}, Inductor {SECONDS}{count}\)",
                     out)

    # A second verify there reuses the plan and reads its regions from the workspace, which its sandboxed child may
    # only read: the regions' starters are made again in the child, not dropped (session 24 on an H200: "Permission
    # denied" writing a region's starter beside its file, and nothing was checked).
    code = verify.main([*TINY_LLAMA_ARGS, "--starters", "--workspace", str(workspace), "--no-compile"])
    out = capsys.readouterr().out
    assert code == EXIT_PASS and "dropped" not in out and "plan " in out and "profiling llama.py:Model" not in out
    report = read_report(workspace)
    assert report["correctness"]["passed"] and not report["dropped"]
    assert [k["kernel_type"] for k in report["checked"]["kernels"]] == [e["kernel_type"] for e in plan["entries"]]


def test_starters_are_made_for_the_plans_top_kernel_types_and_the_log_says_how_many_were_left(tmp_path):
    # A convolutional net plans thirty kernel types; each starter costs a compile and an autotuning.
    entries = [{"rank": rank, "kernel_type": kernel_type, "dtype": "float32", "shapes": shapes, "share": 0.3 / rank,
                "amdahl_2x": 1.1} for rank, (kernel_type, shapes) in enumerate(LLAMA_SHAPES.items(), start=1)]
    plan = Plan.from_json({"model": "llama.py:Model", "device": "cpu", "dtype": "float32", "entries": entries})
    folder = verification.write_starter_manifest(plan, tmp_path / "two", top=2)
    made = json.loads((folder / MANIFEST_NAME).read_text())["kernels"]
    assert sorted(made) == sorted(f"{e['rank']}_{e['kernel_type']}" for e in entries[:2])
    share = 0.3 + 0.15
    assert verification._which_types(plan, 2) == (f"the top 2 of {len(entries)} kernel types ({share:.0%} of the "
                                                  "profiled time; --top 0 checks them all)")
    every = json.loads((verification.write_starter_manifest(plan, tmp_path / "all") / MANIFEST_NAME).read_text())
    every = every["kernels"]
    assert len(every) == len(entries) and verification._which_types(plan, 0) == f"{len(entries)} kernel types"


@pytest.mark.slow
def test_starters_reuse_this_models_plan(tmp_path, capsys):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    entries = [{"rank": rank, "kernel_type": kernel_type, "dtype": "float32", "shapes": shapes, "share": 0.1 * rank,
                "amdahl_2x": 1 / (1 - 0.05 * rank)}
               for rank, (kernel_type, shapes) in enumerate(LLAMA_SHAPES.items(), start=1)]
    plan_text = json.dumps({"model": "llama.py:Model", "device": "cpu", "dtype": "float32", "timing": "CPU op time",
                            "device_name": "cpu", "entries": entries})
    (workspace / PLAN_FILE).write_text(plan_text)

    code = verify.main([*TINY_LLAMA_ARGS, "--starters", "--workspace", str(workspace), "--no-compile",
                        "--route", "all"])

    assert code == EXIT_PASS
    assert (workspace / PLAN_FILE).read_text() == plan_text and "profiling" not in capsys.readouterr().out
    report = read_report(workspace)
    assert [(k["name"], k["file"], k["share"]) for k in report["kernels"]] == [
        (f"{e['rank']}_{e['kernel_type']}", str(starter_path(e["kernel_type"])), e["share"]) for e in entries]
    assert all(k["hits"] > 0 and k["fallbacks"] == 0 for k in report["kernels"])
    with pytest.raises(NothingToPlugIn, match="nothing to plug in"):
        verification.write_starter_manifest(Plan(model="llama.py:Model", device="cpu", dtype="float32", entries=[]),
                                            tmp_path)


@pytest.mark.slow
def test_a_wrong_kernel_fails_the_check_and_compile_is_timed(tmp_path, capsys):
    model_file = tmp_path / "softmax_model.py"
    model_file.write_text(textwrap.dedent(SOFTMAX_MODEL))
    wrong = reference_kernel("softmax", body="reference.softmax(*args) * 1.01")
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 32}]}, sources={"softmax": wrong})
    workspace = tmp_path / "ws"

    # aot_eager: torch.compile's tracing without inductor's C++ compile, which is slow on this CPU.
    code = verify.main([str(model_file), "--device", "cpu", "--optimized-dir", str(folder),
                        "--workspace", str(workspace), "--compile-backend", "aot_eager", "--route", "all"])

    assert code == EXIT_FAIL
    report = read_report(workspace)
    check = report["correctness"]
    assert not check["passed"]
    assert 0.005 < check["max_error"] < 0.02 and check["variant_max_error"] == pytest.approx(check["max_error"])
    assert report["kernels"][0]["hits"] == 1
    variants = report["variants"]
    assert set(variants) == {"eager", "compile", "ours", "ours_compile"}
    assert all(v["ms"] > 0 and v["failed"] is None for v in variants.values())
    assert variants["compile"]["graph_breaks"] == variants["ours_compile"]["graph_breaks"] == 0
    # A wrong AutoKernel variant never counts as AutoKernel's best.
    assert report["verdict"]["autokernel_best"] is None
    assert "no plan at" in report["plan"]
    assert "FAIL" in capsys.readouterr().out


def test_a_plan_profiled_at_other_inputs_is_not_this_models(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Softmax(dim=-1)).eval()

    def loaded_at(*shape):
        return models.LoadedModel(model=model, inputs=(torch.randn(*shape),), name="softmax-head",
                                  dtype=torch.float32, device=torch.device("cpu"))

    profiler.profile_to_workspace(model, loaded_at(4, 16).inputs, name="softmax-head", workspace=tmp_path,
                                  warmup=0, iters=1, gpu=hardware.CPU_INTERPRETER)
    plan_path = tmp_path / PLAN_FILE

    plan, note = verification.read_model_plan(plan_path, loaded_at(4, 16))
    assert plan is not None and plan.inputs == [{"shape": [4, 16], "dtype": "float32"}]
    assert note.startswith(f"shares from {plan_path}") and f"; {profiler.CPU_CAVEAT}" in note   # the plan's label too
    plan, note = verification.read_model_plan(plan_path, loaded_at(8, 16))
    assert plan is None
    assert note == (f'{plan_path} is the plan of softmax-head (cpu, float32) with inputs '
                    f'[{{"shape": [4, 16], "dtype": "float32"}}], not [{{"shape": [8, 16], "dtype": "float32"}}]')
    # A plan written before inputs were recorded still matches on name, device and dtype.
    old_plan = json.loads(plan_path.read_text())
    del old_plan["inputs"]
    plan_path.write_text(json.dumps(old_plan))
    plan, _ = verification.read_model_plan(plan_path, loaded_at(8, 16))
    assert plan == Plan.from_json(old_plan) and plan.inputs is None


@pytest.mark.slow
def test_missing_kernels_or_model_exit_with_a_message(tmp_path, capsys):
    code = verify.main([*TINY_LLAMA_ARGS, "--optimized-dir", str(tmp_path / "none"), "--workspace", str(tmp_path)])
    assert code == EXIT_ERROR
    assert "manifest.json does not exist" in capsys.readouterr().err
    code = verify.main([str(tmp_path / "missing.py"), "--optimized-dir", str(tmp_path), "--workspace", str(tmp_path)])
    assert code == EXIT_ERROR
    assert "Model file not found" in capsys.readouterr().err
    assert not (tmp_path / REPORT_FILE).exists()


def _save_run(workspace, model_flags) -> None:
    from autokernel.core.contracts import RunSettings
    from autokernel.core.run_records import RunState
    from autokernel.search import run_state

    run_state.save(RunState(tag="night", jobs=[], kept_commit="abc", settings=RunSettings(),
                            model=None if model_flags is None else {"flags": model_flags, "inputs": None}),
                   workspace / run_state.STATE_FILE_NAME)


def test_verify_without_a_model_needs_a_run_that_recorded_one(tmp_path, capsys):
    assert verify.main(["--workspace", str(tmp_path)]) == EXIT_ERROR
    assert "give the model to verify (a model file, or --hf NAME): there is no run in" in capsys.readouterr().err
    _save_run(tmp_path, None)
    assert verify.main(["--workspace", str(tmp_path)]) == EXIT_ERROR
    assert "run night in" in capsys.readouterr().err
    assert verify.main(["--model-arg", "config=tiny", "--workspace", str(tmp_path)]) == EXIT_ERROR
    assert "name the model these flags are for" in capsys.readouterr().err


@pytest.mark.slow
def test_verify_without_a_model_takes_the_runs_and_a_check_of_no_call_is_no_pass(tmp_path, capsys):
    model_file = tmp_path / "softmax_model.py"
    model_file.write_text(textwrap.dedent(SOFTMAX_MODEL))
    # Verified at 8 rows; the model (4 rows) makes no call the kernel may take: every call falls back.
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 8, "N": 32}]},
                             sources={"softmax": reference_kernel("softmax")})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    _save_run(workspace, [str(model_file), "--dtype", "float32"])

    code = verify.main(["--optimized-dir", str(folder), "--workspace", str(workspace), "--no-compile"])

    out = capsys.readouterr().out
    assert f"verifying the model run night optimized: {model_file} --dtype float32" in out
    assert code == EXIT_NOTHING_CHECKED
    check = read_report(workspace)["correctness"]
    assert check["passed"] and check["calls_checked"] == 0
    assert check["not_checked"] == ["1_softmax: its 1 call fell back to PyTorch: shape M=4,N=32 not verified (1x)"]
    assert "NOTHING CHECKED" in out and "PASS" not in out


def test_the_report_names_the_runs_whose_kernels_it_verified(tmp_path):
    # report.md shows a verdict only beside the rows of a run it verified (reports/report.py verdict_of_run).
    folder = tmp_path / "opt"
    folder.mkdir()
    write_manifest(folder / MANIFEST_NAME, {"1_softmax": {"tag": "night2"}, "2_rmsnorm": {"tag": "night1"},
                                                   "3_matmul": {}})
    assert verification.kernel_runs(folder) == ["night1", "night2"]
    assert verification.kernel_runs(tmp_path / "absent") == [] and verification.kernel_runs(None) == []


def test_a_time_limit_reaches_the_sandboxed_child_as_a_deadline_from_verifys_start(monkeypatch, tmp_path):
    from autokernel.verify import deadline, isolated

    monkeypatch.setattr(deadline, "now", lambda: 1000.0)
    handed = {}
    monkeypatch.setattr(isolated, "verify_in_sandbox", lambda argv, **kwargs: handed.setdefault("argv", argv) and 0)
    verify.main([*TINY_LLAMA_ARGS, "--time-limit", "90", "--workspace", str(tmp_path)])
    argv = handed["argv"]
    assert argv[argv.index("--deadline") + 1] == "1090.0"
    child = verify.build_parser().parse_args(argv)
    assert child.deadline == 1090.0 and child.time_limit == 90
