"""The benchmarks' entry points (benchmarks/kernels.py, end_to_end.py, loop.py, cuda_check.py, judge.py): every
suite is a subcommand of one of them, every subcommand's --help shows the options its old script took, the
subcommands that run on CPU run through them, and the shared helpers of benchmarks/common.py do what they say."""

import ast
import json
from pathlib import Path

import pytest

from benchmarks import common, cuda_check, end_to_end, judge, kernels, loop

ENTRY_POINTS = {"kernels": kernels, "end_to_end": end_to_end, "loop": loop, "cuda_check": cuda_check, "judge": judge}
SUITES = Path(common.ROOT / "benchmarks" / "suites")
SUBCOMMANDS = [(entry, name, module) for entry, point in ENTRY_POINTS.items()
               for name, module in point.SUBCOMMANDS.items()]


def options_of(module: str) -> set[str]:
    """The --options a suite's add_arguments adds to its own parser (not to nested subcommands), help shown."""
    tree = ast.parse((SUITES / f"{module}.py").read_text())
    add_arguments = next(node for node in tree.body if isinstance(node, ast.FunctionDef)
                         and node.name == "add_arguments")
    found = set()
    for call in ast.walk(add_arguments):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "parser"):
            hidden = any(k.arg == "help" and "SUPPRESS" in ast.unparse(k.value) for k in call.keywords)
            found |= {a.value for a in call.args if isinstance(a, ast.Constant) and a.value.startswith("--")
                      and not hidden}
    return found


def help_of(point, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        point.main(argv)
    assert exit_.value.code == 0
    return capsys.readouterr().out


def test_every_suite_is_the_subcommand_of_exactly_one_entry_point():
    modules = [module for _, _, module in SUBCOMMANDS]
    assert len(modules) == len(set(modules))
    assert sorted(modules) == sorted(p.stem for p in SUITES.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize(("entry", "name", "module"), SUBCOMMANDS, ids=[f"{e} {n}" for e, n, _ in SUBCOMMANDS])
def test_every_subcommand_helps_with_the_options_of_its_old_script(entry, name, module, capsys):
    text = help_of(ENTRY_POINTS[entry], [name, "--help"], capsys)
    assert f"usage: {entry}.py {name}" in " ".join(text.split())
    # The description is the suite's docstring: what it measures and against what.
    assert common.summary_line(module)[:60] in " ".join(text.split())
    options = options_of(module)
    assert options <= set(text.replace(",", " ").split()), options - set(text.replace(",", " ").split())


def test_the_old_options_are_found_where_there_are_some():
    # The check above compares sets; this keeps it from passing on an empty one.
    assert {"--types", "--dtypes", "--repeats", "--out"} <= options_of("compare")
    assert {"--out", "--dry-run", "--limit", "--workers", "--budget-s", "--rep-ms"} <= options_of("gemm_sweep")
    assert "--in-child" not in options_of("cuda_gemm_check")      # hidden from --help, as before


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_entry_points_help_lists_its_subcommands_with_their_summaries(entry, capsys):
    text = " ".join(help_of(ENTRY_POINTS[entry], ["--help"], capsys).split())
    for name, module in ENTRY_POINTS[entry].SUBCOMMANDS.items():
        assert name in text and common.summary_line(module)[:40] in text


def test_an_unknown_or_missing_subcommand_is_a_usage_error(capsys):
    for argv in (["no-such-benchmark"], []):
        with pytest.raises(SystemExit) as exit_:
            kernels.main(argv)
        assert exit_.value.code == 2
    assert "invalid choice: 'no-such-benchmark'" in capsys.readouterr().err


def test_a_subcommand_with_its_own_subcommands_keeps_them(capsys):
    text = help_of(end_to_end, ["models", "run", "--help"], capsys)
    assert {"--only", "--timeout", "--stop-after", "--no-overhead"} <= set(text.split())


def test_only_the_chosen_subcommands_module_is_imported():
    parser = common.build_parser("x", {"compare": "compare", "count": "compile_count"}, chosen="compare")
    args = parser.parse_args(["compare", "--repeats", "5"])
    assert args.repeats == 5 and args.run.__module__ == "benchmarks.suites.compare"
    with pytest.raises(SystemExit):    # compile_count's options were never added: its module was not loaded
        parser.parse_args(["count", "kernel.py", "--dtype", "float16"])


def test_model_gemms_runs_on_the_cpu_through_its_entry_point(capsys):
    assert kernels.main(["model-gemms", "--tiny"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| M x N x K | kind | used by |"
    assert any("| dual |" in line and "llama 4x1024" in line for line in lines)


def test_models_summarize_turns_reports_into_the_table(tmp_path, capsys):
    (tmp_path / "reports.json").write_text(json.dumps({"gpt2 1x512": {"exit": "timeout", "seconds": 900.0,
                                                                      "report": None}}))
    assert end_to_end.main(["models", "summarize", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| model | eager | compile |") and lines[2].startswith("| gpt2 1x512 | exit timeout |")


# ---------------------------------------------------------------------------------------------- common.py
def test_latency_stats_are_the_median_and_the_spread_in_microseconds():
    assert common.latency_stats([0.003, 0.001, 0.002]) == pytest.approx(
        {"latency_us": 2.0, "latency_min_us": 1.0, "latency_max_us": 3.0})
    assert common.median_range([0.9, 0.8, 0.85]) == "0.85 (0.80-0.90)"
    assert common.median_range([0.91]) == "0.91"


def test_the_cpu_timer_calls_the_function_as_often_as_asked():
    calls = []
    ms = common.timer_ms(False, cpu_calls=3)(lambda: calls.append(1))
    assert len(calls) == 3 and ms >= 0


def test_a_result_names_device_date_and_versions(tmp_path):
    info = common.RunInfo("NVIDIA H100 80GB HBM3", "2026-11-27", "2.13.0", "3.9.0", True)
    assert common.dated_path(tmp_path, info, "compare") == tmp_path / "2026-11-27_NVIDIA-H100-80GB-HBM3_compare"
    assert common.RunInfo("cpu (interpreter)", "d", "t", "x", False).slug == "cpu"
    assert info.as_dict() == {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-27", "torch": "2.13.0",
                              "triton": "3.9.0"}
    here = common.run_info("cpu label", on_gpu=False)
    assert here.device == "cpu label" and here.torch and here.triton and len(here.date) == 10


def test_outputs_are_written_into_folders_made_for_them(tmp_path, monkeypatch):
    path = common.write_json(tmp_path / "a" / "b.json", {"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}
    monkeypatch.setenv("OUT", str(tmp_path))
    assert common.env_out("check.json") == tmp_path / "check.json"
    assert common.env_out("check.json", "given.json") == Path("given.json")
    monkeypatch.delenv("OUT")
    assert common.env_out("check.json") is None


def test_a_problem_loads_at_its_sizes_or_divided():
    full = common.load_problem("sum_middle")
    small = common.load_problem("sum_middle", divisor=64)
    sizes = {k: v for k, v in vars(full).items() if k.isupper() and isinstance(v, int)}
    assert sizes and all(getattr(small, k) == max(2, v // 64) for k, v in sizes.items())
    assert small.get_inputs()[0].shape == tuple(max(2, v // 64) for v in (full.BATCH, full.DIM1, full.DIM2))


def test_a_table_header_has_a_rule_per_column():
    assert common.table_header(["a", "b"]) == ["| a | b |", "|---|---|"]
    assert common.fmt(None) == "-" and common.fmt(1.234, ".2f") == "1.23"


def test_compile_count_in_one_dtype_replays_every_shape_of_the_full_run_in_the_jobs_dtype_alone():
    import torch

    from autokernel.kernel_types import registry
    from benchmarks.suites.compile_count import cases

    kt = registry.get("rmsnorm_mlp")
    job = [{"M": 4096, "D": 2048, "F": 5632, "act": "silu"}]
    full, one = cases(kt, job, torch.float16), cases(kt, job, torch.float16, one_dtype=True)
    assert {dtype for _, dtype, _ in one} == {torch.float16}
    assert {dtype for _, dtype, _ in full} == {torch.float16, torch.bfloat16, torch.float32}
    assert [case for case in full if case[1] == torch.float16] == one, "the same checks, the other dtypes' left out"
