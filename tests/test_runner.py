"""Tests for autokernel/judge/runner.py: time limits that kill whole process trees, the allow-listed environment,
results.

The sandbox's confinement itself (what a child cannot read, write, reach or leave behind) is in tests/test_sandbox.py.
"""

import json
import sys
import textwrap
import time
from dataclasses import fields
from pathlib import Path

import pytest

from autokernel.core import child_output
from autokernel.core.contracts import BenchResult
from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.sandbox.child_env import child_environment
from autokernel.search import sandbox_checks
from tests.processes import all_gone_within, new_token


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_timeout_kills_the_child_and_its_grandchildren(tmp_path):
    token = new_token()
    code = f"""
        import subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", {token!r}])
        open({str(tmp_path / "started")!r}, "w").write("")
        time.sleep(60)
    """
    result = runner.run_child(_python(code), timeout_s=1.5, cwd=tmp_path, writable=[tmp_path])
    assert result.timed_out and (tmp_path / "started").exists()
    assert result.wall_seconds < 1.5 + runner.KILL_GRACE_S + 5
    assert all_gone_within(token)


def test_child_that_ignores_sigterm_is_killed(tmp_path):
    code = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """
    # The timeout must outlast the child's start (Python in the sandbox): with 1 s, a loaded 2-core CI machine
    # killed it before it printed "ready" (session 13). It sleeps 60 s, so any timeout below that still kills it.
    result = runner.run_child(_python(code), timeout_s=6.0, cwd=tmp_path)
    assert result.timed_out
    assert result.returncode == -9
    assert "ready" in result.stdout


def test_normal_exit_reports_code_and_output(tmp_path):
    code = """
        import os, sys
        print("to stdout", os.getcwd())
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """
    result = runner.run_child(_python(code), timeout_s=30, cwd=tmp_path)
    assert not result.timed_out
    assert result.returncode == 3
    assert result.stdout.strip() == f"to stdout {tmp_path}"
    assert result.stderr.strip() == "to stderr"


def test_environment_is_scrubbed_of_secrets(tmp_path, monkeypatch):
    secrets = {"ANTHROPIC_API_KEY": "a", "ANTHROPIC_BASE_URL": "b", "OPENAI_ORG": "c", "HF_TOKEN": "d",
               "MY_SERVICE_API_KEY": "e", "DB_SECRET_VALUE": "f", "github_token": "g", "GITHUB_PAT": "h",
               "DATABASE_URL": "postgres://user:password@db/prod", "AWS_SECRET_ACCESS_KEY": "i"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AUTOKERNEL_HARMLESS", "kept")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    result = runner.run_child(_python(code), timeout_s=30, cwd=tmp_path, env_extra={"EXTRA_SETTING": "1"})
    child_env = json.loads(result.stdout)
    assert not set(secrets) & set(child_env)
    assert child_env["AUTOKERNEL_HARMLESS"] == "kept"
    assert child_env["EXTRA_SETTING"] == "1"
    assert "PATH" in child_env


def test_output_is_bounded_to_its_tail(tmp_path):
    code = """
        import sys
        for i in range(40000):
            sys.stdout.write(f"line {i:08d} " + "x" * 20 + "\\n")
        sys.stdout.write("LAST LINE\\n")
    """
    result = runner.run_child(_python(code), timeout_s=60, cwd=tmp_path)
    assert len(result.stdout) < child_output.OUTPUT_LIMIT_BYTES + 200
    assert result.stdout.startswith("[... ")
    assert result.stdout.rstrip().endswith("LAST LINE")


def _fake_bench(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "bench.py"
    script.write_text("import json, sys, time\nargs = sys.argv[1:]\n" + textwrap.dedent(body))
    return script


def test_run_bench_returns_the_json_bench_wrote(tmp_path):
    bench = _fake_bench(tmp_path, """
        import os
        out = os.fdopen(int(args[args.index("--result-fd") + 1]), "w")
        nonce = os.environ["AUTOKERNEL_RESULT_NONCE"]
        json.dump({"correctness": "PASS", "latency_us": 12.5, "args": args, "nonce": nonce}, out)
    """)
    result = runner.run_bench(tmp_path / "kernel.py", shapes=[{"M": 4, "N": 8}, {"M": 2, "N": 2}],
                              dtype="float32", timeout_s=30, seed=7, extra_args=["--quick"], bench_script=bench)
    assert result.correctness == "PASS"
    assert result.latency_us == 12.5
    args = result.extra["args"]
    assert args[:2] == ["--kernel", str(tmp_path / "kernel.py")]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--shape"] == ["M=4,N=8", "M=2,N=2"]
    assert args[args.index("--dtype") + 1] == "float32"
    assert args[args.index("--seed") + 1] == "7"
    assert "--json-out" not in args      # no path to a verdict on any command line
    assert args[-1] == "--quick"
    assert result.wall_seconds > 0
    assert "nonce" not in result.to_json()


def test_a_result_file_without_the_runs_nonce_is_a_crash(tmp_path):
    # A verdict written by whatever cannot know the run's nonce (the worker never sees it).
    bench = _fake_bench(tmp_path, """
        import os
        out = os.fdopen(int(args[args.index("--result-fd") + 1]), "w")
        json.dump({"correctness": "PASS", "latency_us": 0.5, "nonce": "guessed"}, out)
    """)
    result = runner.run_bench("kernel.py", shapes=[], dtype="float16", timeout_s=30, bench_script=bench)
    assert result.correctness == "CRASH"
    assert "not written by the judge" in result.message
    assert result.latency_us is None


def test_a_pass_with_a_failing_exit_code_is_a_crash(tmp_path):
    bench = _fake_bench(tmp_path, """
        import os
        out = os.fdopen(int(args[args.index("--result-fd") + 1]), "w")
        json.dump({"correctness": "PASS", "nonce": os.environ["AUTOKERNEL_RESULT_NONCE"]}, out)
        out.close()
        sys.exit(1)
    """)
    result = runner.run_bench("kernel.py", shapes=[], dtype="float16", timeout_s=30, bench_script=bench)
    assert result.correctness == "CRASH"
    assert "says PASS but bench.py exited with code 1" in result.message


def test_run_bench_without_json_is_a_crash_with_stderr_tail(tmp_path):
    bench = _fake_bench(tmp_path, """
        for i in range(50):
            print(f"noise {i}", file=sys.stderr)
        print("SyntaxError: invalid syntax in kernel.py", file=sys.stderr)
        sys.exit(2)
    """)
    result = runner.run_bench("kernel.py", shapes=[], dtype="float16", timeout_s=30, bench_script=bench)
    assert result.correctness == "CRASH"
    assert "exited with code 2" in result.message
    assert "SyntaxError: invalid syntax in kernel.py" in result.message
    assert "noise 0\n" not in result.message
    assert {f.name for f in fields(BenchResult)} - {"extra"} == set(result.to_json())
    assert result.latency_us is None


def test_run_bench_that_hangs_is_a_timeout(tmp_path):
    bench = _fake_bench(tmp_path, "time.sleep(60)\n")
    started = time.monotonic()
    result = runner.run_bench("kernel.py", shapes=[], dtype="float16", timeout_s=1, bench_script=bench)
    assert result.correctness == "TIMEOUT"
    assert "1 s limit" in result.message
    assert time.monotonic() - started < 1 + runner.KILL_GRACE_S + 5


def test_interrupting_the_caller_kills_the_child(tmp_path, monkeypatch):
    pid_file, token = tmp_path / "child.pid", new_token()
    code = f"""
        import os, time
        open({str(pid_file)!r}, "w").write({token!r})
        time.sleep(60)
    """
    original_wait = runner.subprocess.Popen.wait

    def wait_then_interrupt(proc, timeout=None):
        if timeout is not None and timeout > runner.KILL_GRACE_S:
            while not pid_file.exists():
                time.sleep(0.02)
            raise KeyboardInterrupt
        return original_wait(proc, timeout=timeout)

    monkeypatch.setattr(runner.subprocess.Popen, "wait", wait_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        runner.run_child(_python(code), timeout_s=60, cwd=tmp_path, writable=[tmp_path])
    assert all_gone_within(token)


def test_child_environment_is_an_allow_list_without_secrets():
    env = child_environment({"Openai_Api_Key": "x", "PATH": "/bin", "my_password": "y", "GITHUB_PAT": "p",
                                    "DATABASE_URL": "postgres://u:p@h/db", "CUDA_VISIBLE_DEVICES": "0",
                                    "TORCH_HUB_TOKEN": "t", "LC_ALL": "C", "SOME_TOOL_SETTING": "1"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0", "LC_ALL": "C"}


def test_exit_descriptions_name_the_signal():
    def described(returncode, **fields):
        return runner.ChildResult(returncode, "", "", False, 0.0, **fields).exit_description()
    assert described(2) == "exited with code 2"
    assert described(-11) == "was killed by signal SIGSEGV (Segmentation fault)"
    assert "memory" in described(-9, stopped="memory: the process tree used 900 MiB, over its 512 MiB cap")


def test_a_segfault_is_a_crash_that_names_its_signal(tmp_path):
    bench = _fake_bench(tmp_path, """
        import os, signal
        print("about to fault", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    result = runner.run_bench("kernel.py", shapes=[], dtype="float16", timeout_s=30, bench_script=bench)
    assert result.correctness == "CRASH"
    assert "bench.py was killed by signal SIGSEGV (Segmentation fault) without a result" in result.message
    assert "about to fault" in result.message


def test_a_watcher_sees_each_line_as_the_child_prints_it(tmp_path):
    seen = []
    code = """
        import sys, time
        for stage in ("smoke", "shape sweep"):
            print(f"STAGE {stage}", flush=True)
            time.sleep(0.2)
        print("to stderr", file=sys.stderr, flush=True)
    """
    with child_output.watch_output(lambda line: seen.append((time.monotonic(), line))):
        result = runner.run_child(_python(code), timeout_s=30, cwd=tmp_path)
    finished = time.monotonic()
    assert [line for _, line in seen] == ["STAGE smoke", "STAGE shape sweep", "to stderr"]
    assert seen[0][0] < finished - 0.3, "lines arrive while the child runs, not at its end"
    assert result.stdout.splitlines() == ["STAGE smoke", "STAGE shape sweep"]


def test_a_sandbox_that_hides_the_gpu_is_reported_before_the_run(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)        # the loop's process sees a GPU
    monkeypatch.setattr(sandbox_checks, "GPU_PROBE", "import sys; print('cudaGetDeviceCount error 304', file=sys.stderr); "
                                             "sys.exit(3)")              # the candidates' sandbox does not
    problem = sandbox_checks.sandbox_gpu_problem(tmp_path)
    assert "cannot use it" in problem and "error 304" in problem and CONFINE_ENV in problem
    monkeypatch.setattr(sandbox_checks, "GPU_PROBE", "pass")
    assert sandbox_checks.sandbox_gpu_problem(tmp_path) is None


def test_without_a_gpu_there_is_nothing_to_probe(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(runner, "run_child", lambda *a, **k: pytest.fail("no child should start"))
    assert sandbox_checks.sandbox_gpu_problem(tmp_path) is None


def test_the_sandbox_is_probed_once_per_set_of_switches(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from autokernel.sandbox.namespaces import NETWORK_ENV

    reports = [{}, {"missing": ["IPC namespace (off)"]}, {"missing": []}]    # the first probe gets no report
    started = []

    def probe(cmd, **kwargs):
        started.append(cmd)
        return SimpleNamespace(sandbox=reports[len(started) - 1])

    monkeypatch.setattr(sandbox_checks, "_found", {})
    monkeypatch.setattr(sandbox_checks, "run_child", probe)
    monkeypatch.delenv(NETWORK_ENV, raising=False)
    assert sandbox_checks.missing_protections(tmp_path) == []
    assert sandbox_checks.missing_protections(tmp_path) == ["IPC namespace (off)"], "a probe without a report is not kept"
    assert sandbox_checks.missing_protections(tmp_path) == ["IPC namespace (off)"] and len(started) == 2
    monkeypatch.setenv(NETWORK_ENV, "0")               # another switch: probed again
    assert sandbox_checks.missing_protections(tmp_path) == [] and len(started) == 3
