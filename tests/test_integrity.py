"""Tests for autokernel/search/integrity.py: candidates that reach past kernel.py are caught, and the tree restored.

Each attack is a kernel file whose import does the damage, judged by the real loop through the
real sandbox (runner.run_child) with a stand-in bench.py that imports it the way bench.py does.
With Landlock (the default) the damage cannot be done at all; with it off (AUTOKERNEL_SANDBOX_FS=0,
what a kernel without Landlock gets) the integrity checks find it, undo it, and fail the candidate.
Either way: no planted command ever runs, nothing of the user's changes, and nothing is kept.
"""

import functools
import json
import textwrap
from pathlib import Path

import pytest

from autokernel.agents.base import SearchExhausted
from autokernel.core.contracts import RunSettings
from autokernel.core.run_records import RunState
from autokernel.core.live import ProgressView
from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.sandbox import landlock
from autokernel.search import gitops, integrity, loop, results
from autokernel.search.budget import Budget
from tests.loop_helpers import ScriptedAgent, git, make_job, make_project, proposal

STAND_IN_BENCH = '''
import importlib.util, json, os, sys
nonce = os.environ.pop("AUTOKERNEL_RESULT_NONCE")  # taken before the candidate runs, as the real judge does
args = sys.argv[1:]
kernel, out = args[args.index("--kernel") + 1], os.fdopen(int(args[args.index("--result-fd") + 1]), "w")
spec = importlib.util.spec_from_file_location("candidate", kernel)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
json.dump({"correctness": "PASS", "latency_us": getattr(module, "LATENCY", 100.0), "kernel_type": module.KERNEL_TYPE, "nonce": nonce},
          out)
'''


def kernel(latency: float, attack: str = "") -> str:
    return (f"import os, subprocess\nKERNEL_TYPE = 'softmax'\nLATENCY = {latency}\n\n"
            + textwrap.dedent(attack) + "\n\ndef kernel_fn(x):\n    return x\n")


def attacks(marker: Path) -> dict[str, str]:
    """What a candidate might try at import, each aimed at the user or the judge; `marker` proves a planted command ran."""
    planted = f"#!/bin/sh\nenv > {marker}\n"
    return {
        "fsmonitor": f"""
            open("planted.sh", "w").write({planted!r}); os.chmod("planted.sh", 0o755)
            open(".git/config", "a").write("[core]\\n\\tfsmonitor = " + os.path.abspath("planted.sh") + "\\n")
        """,
        "hook": f"""
            open(".git/hooks/post-commit", "w").write({planted!r}); os.chmod(".git/hooks/post-commit", 0o755)
        """,
        "own commit": """
            open("bench.py", "a").write("# a judge that always says PASS\\n")
            subprocess.run(["git", "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "mine"], check=True)
        """,
        "results and state": """
            open("results.tsv", "a").write("99\\tfake\\tsoftmax\\n")
            open("workspace/state.json", "w").write("{}")
        """,
        "stray file": """
            open("stray.py", "w").write("left behind")
        """,
        "planted bytecode": """
            os.makedirs("__pycache__", exist_ok=True)
            open("__pycache__/bench.cpython-311.pyc", "wb").write(b"not what the source says")
        """,
    }


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = make_project(tmp_path / "project", monkeypatch)
    (root / "bench.py").write_text(STAND_IN_BENCH)
    git(root, "add", "bench.py")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the judge")
    monkeypatch.setattr(loop.runner, "run_bench", functools.partial(runner.run_bench, bench_script=root / "bench.py"))
    return root


@pytest.mark.slow
@pytest.mark.parametrize("confined", [True, False], ids=["landlock", "checks only"])
def test_every_attack_is_undone_and_never_kept(project, tmp_path, monkeypatch, confined):
    if confined and landlock.abi() < 1:
        pytest.skip("this kernel has no Landlock")
    monkeypatch.setenv(CONFINE_ENV, "1" if confined else "0")
    marker = tmp_path / "planted-command-ran"
    named = attacks(marker)
    agent = ScriptedAgent(*[proposal(name, kernel(1.0, code)) for name, code in named.items()],
                          SearchExhausted("done"))
    repo = gitops.KernelRepo(project)
    config_before = (project / ".git" / "config").read_text()
    bench_before = (project / "bench.py").read_text()
    repo.start_branch("attacks")
    job = make_job(project, 1, kernel(100.0))
    state = RunState(tag="attacks", jobs=[job], kept_commit=repo.head(),
                     settings=RunSettings(max_consecutive_reverts=10, target_speedup=1000))
    state = loop.OptimizationRun(state, repo=repo, agent=agent, view=ProgressView(interactive=False),
                                 budget=Budget(3600)).run()

    rows = results.read_rows(project / "results.tsv")
    verdicts = {row["description"]: row["correctness"] for row in rows[1:]}
    assert set(verdicts) == set(named) and len(rows) == len(named) + 1, rows
    assert [row["status"] for row in rows[1:]] == ["revert"] * len(named), "an attack was kept"
    if confined:
        assert set(verdicts.values()) == {"CRASH"}, verdicts      # each import died on a refused write
    else:
        assert set(verdicts.values()) == {"FAIL"}, verdicts       # each was caught and undone
        messages = [entry["message"] for entry in agent.contexts[-1].history]
        assert all(message.startswith("sandbox: the candidate ") for message in messages), messages
        assert any("changed .git/config" in message for message in messages)
        assert any("moved the ref refs/heads/autokernel/attacks" in message for message in messages)
        assert any("changed results.tsv" in message and "changed workspace/state.json" in message
                   for message in messages)
    assert not marker.exists(), "a command the candidate planted ran"
    assert (project / ".git" / "config").read_text() == config_before
    assert not (project / ".git" / "hooks" / "post-commit").exists()
    assert (project / "bench.py").read_text() == bench_before and not (project / "stray.py").exists()
    assert not (project / "__pycache__" / "bench.cpython-311.pyc").exists()
    assert not (project / "planted.sh").exists()
    assert "mine" not in git(project, "log", "--all", "--format=%s").splitlines()
    assert state.finished[0]["speedup_over_baseline"] == 1.0


def test_the_contract_check_reads_the_source_without_running_it():
    integrity.check_contract(kernel(1.0), "softmax")
    with pytest.raises(integrity.ContractError, match="found 'matmul'"):
        integrity.check_contract(kernel(1.0).replace("'softmax'", "'matmul'"), "softmax")
    with pytest.raises(integrity.ContractError, match="never reassigned"):
        integrity.check_contract(kernel(1.0) + "kernel_fn = print\n", "softmax")
    with pytest.raises(integrity.ContractError, match=r"takes \(\*\)"):
        integrity.check_contract(kernel(1.0).replace("def kernel_fn(x):", "def kernel_fn(*args):"), "softmax")
    with pytest.raises(integrity.ContractError, match=r"reference's parameters \(x, weight, eps=..., dim=...\); it takes \(x, weight\)"):
        integrity.check_contract(kernel(1.0).replace("'softmax'", "'rmsnorm'").replace("(x)", "(x, weight)"), "rmsnorm")
    integrity.check_contract("def kernel_fn(:\n", "softmax")       # a syntax error is bench.py's to report


def test_a_snapshot_restores_the_git_config_before_any_git_command_runs(project, tmp_path):
    repo = gitops.KernelRepo(project)
    snapshot = integrity.Snapshot.take(repo)
    marker = tmp_path / "ran"
    script = tmp_path / "monitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    with (project / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {script}\n[alias]\n\tstatus = !touch {marker}\n")
    changes = snapshot.restore(repo)
    assert changes == ["changed .git/config"]
    assert not marker.exists()
    assert json.dumps(snapshot.restore(repo)) == "[]"


# --------------------------------------------------------------------------- CUDA kernel files
CUDA_KERNEL = '''
KERNEL_TYPE = "softmax"
BACKEND = "cuda"
TUNABLES = {"BLOCK_THREADS": 256}
TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256]}
CUDA_SOURCE = r"""
__global__ void softmax_kernel(const float* x, float* y) {}
torch::Tensor softmax_rows(torch::Tensor x) { return x; }
"""
def kernel_fn(x):
    return x
'''


def test_a_cuda_kernel_file_keeps_the_contract():
    integrity.check_contract(CUDA_KERNEL, "softmax")
    from autokernel.core.paths import ROOT

    for name in ("rmsnorm", "softmax", "matmul"):
        integrity.check_contract((ROOT / "kernels" / "cuda" / f"{name}.py").read_text(), name)


@pytest.mark.parametrize("change, expected", [
    (('BACKEND = "cuda"', 'BACKEND = "cpp"'), 'BACKEND must be assigned once, as the literal "triton" or "cuda"'),
    (('BACKEND = "cuda"', 'BACKEND = "cuda"\nBACKEND = "triton"'), "BACKEND must be assigned once"),
    (('CUDA_SOURCE = r"""', 'CUDA_SOURCE = "" + r"""'), "assigns CUDA_SOURCE once, as a string literal"),
    (("softmax_kernel", "nvjet_hsh_decoy"), "like a library's"),
    (("__global__ void softmax_kernel", "void softmax_kernel"), "defines no __global__ function"),
    (('TUNABLES = {"BLOCK_THREADS": 256}', 'TUNABLES = dict(BLOCK_THREADS=256)'), "TUNABLES once, as a dict literal"),
    (('TUNABLES = {"BLOCK_THREADS": 256}', 'TUNABLES = {"BLOCK_THREADS": "256; }"}'), "number or a boolean"),
    (('TUNABLE_CHOICES = {"BLOCK_THREADS": [128, 256]}', ''), "TUNABLE_CHOICES once, as a dict literal"),
])
def test_cuda_kernel_files_that_break_the_contract(change, expected):
    with pytest.raises(integrity.ContractError) as raised:
        integrity.check_contract(CUDA_KERNEL.replace(*change), "softmax")
    assert expected in str(raised.value)


def test_a_triton_file_may_say_so_and_need_not():
    triton_file = CUDA_KERNEL.replace('BACKEND = "cuda"', 'BACKEND = "triton"').replace("TUNABLES = ", "X = ")
    integrity.check_contract(triton_file, "softmax")
    integrity.check_contract(triton_file.replace('BACKEND = "triton"', ""), "softmax")
