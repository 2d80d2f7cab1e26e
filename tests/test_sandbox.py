"""Tests for autokernel/sandbox/launcher.py: each way a candidate could reach past its bench run, tried and refused.

Every attack runs as real code in a child started by runner.run_child, as bench.py's candidate
would be. The attacks that need a secret in the loop's own environment run the "loop" as a helper
process started with that secret, because /proc/<pid>/environ shows a process's initial environment.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autokernel.judge import runner
from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.sandbox import landlock, namespaces, launcher as sandbox
from tests.processes import all_gone_within, gone_within, marked, new_token

ABI = landlock.abi()
needs_landlock = pytest.mark.skipif(ABI < 1, reason="this kernel has no Landlock")
PROJECT = Path(__file__).resolve().parents[1]
SECRET = "sk-ant-test-0123456789-do-not-leak"


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def _run(code: str, cwd: Path, **options) -> runner.ChildResult:
    return runner.run_child(_python(code), timeout_s=60, cwd=cwd, **options)


LOOP_HELPER = """
import json, sys
from autokernel.judge import runner
code, cwd = sys.argv[1], sys.argv[2]
result = runner.run_child([sys.executable, "-c", code], timeout_s=60, cwd=cwd, writable=[cwd])
print(json.dumps({"stdout": result.stdout, "stderr": result.stderr, "returncode": result.returncode}))
"""


def _from_a_loop_with_secrets(code: str, cwd: Path, env: dict | None = None) -> dict:
    """Run `code` as a candidate of a loop process whose initial environment holds SECRET."""
    loop_env = {**os.environ, "ANTHROPIC_API_KEY": SECRET, "GITHUB_PAT": SECRET, "DATABASE_URL": SECRET,
                "PYTHONPATH": str(PROJECT), **(env or {})}
    completed = subprocess.run([sys.executable, "-c", LOOP_HELPER, textwrap.dedent(code), str(cwd)], env=loop_env,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_no_secret_in_the_childs_environment_or_the_loops_proc_entries(tmp_path):
    attack = """
        import os
        needle = "do-not" + "-leak"            # spelled apart: this code is on the loop's command line
        found = {name: value for name, value in os.environ.items() if needle in value}
        print("ENV", sorted(found))
        loop = os.getppid()                     # the launcher; the loop is its parent
        loop = int(open(f"/proc/{loop}/stat").read().rsplit(")", 1)[1].split()[1]) if loop else loop
        for pid in {os.getppid(), loop}:
            for entry in ("environ", "mem", "cmdline"):
                try:
                    data = open(f"/proc/{pid}/{entry}", "rb").read(1 << 20)
                    print(entry, pid, "LEAK" if needle.encode() in data else "readable, no secret")
                except OSError as exc:
                    print(entry, pid, "refused", type(exc).__name__)
    """
    report = _from_a_loop_with_secrets(attack, tmp_path)
    out = report["stdout"]
    assert "ENV []" in out, out
    assert "LEAK" not in out, out
    assert out.count("environ") == 2 and "readable" not in " ".join(l for l in out.splitlines() if "environ" in l)


@needs_landlock
def test_a_key_file_in_the_home_folder_is_out_of_reach(tmp_path):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / ".config" / "anthropic.key").write_text(SECRET)
    work = tmp_path / "work"
    work.mkdir()
    attack = f"""
        import os
        for path in [{str(home / ".config" / "anthropic.key")!r}, os.path.expanduser("~/.config/anthropic.key")]:
            try:
                print("LEAK" if "do-not" + "-leak" in open(path).read() else "read")
            except OSError as exc:
                print("refused", type(exc).__name__)
    """
    report = _from_a_loop_with_secrets(attack, work, env={"HOME": str(home)})
    assert report["stdout"].split() == ["refused", "PermissionError"] * 2, report


@needs_landlock
def test_the_repository_its_git_config_and_its_state_are_read_only(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / "workspace").mkdir()
    (repo / "workspace" / "state.json").write_text("{}")
    (repo / "bench.py").write_text("# the judge\n")
    attack = """
        import os
        for path, mode in [(".git/config", "a"), ("bench.py", "a"), ("new_file.py", "w"), ("workspace/state.json", "w"),
                           (".git/config", "r"), ("workspace/state.json", "r"), ("bench.py", "r")]:
            try:
                open(path, mode).close()
                print(path, mode, "allowed")
            except OSError as exc:
                print(path, mode, "refused")
        os.makedirs(os.environ["TMPDIR"] + "/mine", exist_ok=True)
        open(os.environ["TMPDIR"] + "/mine/x", "w").write("scratch is fine")
        print("scratch", os.environ["TMPDIR"])
    """
    result = runner.run_child(_python(attack), timeout_s=60, cwd=repo)
    lines = result.stdout.splitlines()
    assert lines[:7] == [".git/config a refused", "bench.py a refused", "new_file.py w refused",
                         "workspace/state.json w refused", ".git/config r refused", "workspace/state.json r refused",
                         "bench.py r allowed"], result.stderr
    assert (repo / ".git" / "config").read_text() == "[core]\n" and not (repo / "new_file.py").exists()
    assert not Path(lines[7].split(" ", 1)[1]).exists(), "the private temporary folder was not removed"


@needs_landlock
def test_a_folder_named_readable_inside_the_workspace_is_readable_and_the_rest_of_it_is_not(tmp_path):
    # The judge reads region files from workspace/regions/ (autokernel/kernel_types/regions/store.py); the state
    # beside them stays unreadable, and the regions stay read-only.
    repo = tmp_path / "repo"
    (repo / "workspace" / "regions").mkdir(parents=True)
    (repo / "workspace" / "regions" / "region_1.json").write_text("{}")
    (repo / "workspace" / "state.json").write_text("{}")
    attack = """
        for path, mode in [("workspace/regions/region_1.json", "r"), ("workspace/regions/region_1.json", "a"),
                           ("workspace/state.json", "r")]:
            try:
                open(path, mode).close()
                print(path, mode, "allowed")
            except OSError:
                print(path, mode, "refused")
    """
    result = runner.run_child(_python(attack), timeout_s=60, cwd=repo, readable=[repo / "workspace" / "regions"])
    assert result.stdout.splitlines() == ["workspace/regions/region_1.json r allowed",
                                          "workspace/regions/region_1.json a refused",
                                          "workspace/state.json r refused"], result.stderr


@pytest.mark.parametrize("namespace", ["1", "0"])
def test_a_daemon_in_its_own_session_dies_with_the_run(tmp_path, monkeypatch, namespace):
    # With a PID namespace (where the machine allows one) and without it (the subreaper's walk).
    monkeypatch.setenv(namespaces.NAMESPACE_ENV, namespace)
    pid_file, token = tmp_path / "daemon.pid", new_token()
    attack = f"""
        import ctypes, os, time
        # {token}
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(1, 0)          # no parent-death signal
                open({str(pid_file)!r}, "w").write(str(os.getpid()))
                time.sleep(600)
            os._exit(0)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.01)
    """
    result = _run(attack, tmp_path, writable=[tmp_path])
    assert result.returncode == 0 and result.leftover_processes >= 1
    assert all_gone_within(token)
    isolation = result.sandbox["isolation"]
    assert (isolation in ("pid namespace", "user+pid namespace") or "unshare" in isolation if namespace == "1"
            else isolation == f"no PID namespace ({namespaces.NAMESPACE_ENV}=0)"), isolation


def test_memory_past_the_cap_stops_the_whole_tree(tmp_path):
    attack = """
        import time
        hoard = []
        for _ in range(200):
            hoard.append(bytearray(16 * 2**20))     # 16 MiB, touched
            time.sleep(0.01)
        print("survived")
    """
    result = _run(attack, tmp_path, memory_limit_mb=256)
    assert "survived" not in result.stdout
    assert result.stopped.startswith("memory") and "256 MiB cap" in result.stopped
    assert "stopped by the sandbox (memory" in result.exit_description()


@pytest.mark.skipif(ABI < 4, reason="Landlock TCP rules need ABI 4")
@pytest.mark.parametrize("files_confined", ["1", "0"])
def test_no_tcp_connection_out_of_the_sandbox(tmp_path, monkeypatch, files_confined):
    # With the file rules off (AUTOKERNEL_SANDBOX_FS=0) the network rules stay: a candidate once reached 127.0.0.1 so.
    monkeypatch.setenv(CONFINE_ENV, files_confined)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        attack = f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=5)
                print("connected")
            except OSError as exc:
                print("refused", type(exc).__name__)
        """
        result = _run(attack, tmp_path)
    assert result.stdout.split()[0] == "refused", result.stdout + result.stderr


@pytest.mark.skipif(ABI < 6, reason="Landlock signal scoping needs ABI 6")
@pytest.mark.parametrize("namespace", ["1", "0"])
def test_the_child_cannot_kill_its_launcher_or_the_loop(tmp_path, monkeypatch, namespace):
    # In a PID namespace the loop and the launcher have no pid the child can name; without one, Landlock's
    # signal scoping refuses. Either way the child's signal reaches neither (this test would stop if it did).
    monkeypatch.setenv(namespaces.NAMESPACE_ENV, namespace)
    attack = f"""
        import os, signal
        for pid in ({os.getpid()}, int(open("/proc/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()[1])
                    if os.path.exists("/proc/{os.getpid()}") else -1):
            try:
                os.kill(pid, signal.SIGSTOP) if pid > 1 else None
                print("signalled" if pid > 1 else "not-named")
            except (PermissionError, ProcessLookupError):
                print("refused")
    """
    result = _run(attack, tmp_path)
    assert "signalled" not in result.stdout.split() and len(result.stdout.split()) == 2, result.stderr


def test_a_root_child_has_no_capabilities(tmp_path):
    result = _run("print(open('/proc/self/status').read())", tmp_path)
    capabilities = {name: int(value, 16) for name, value in
                    (line.split(":\t") for line in result.stdout.splitlines() if line.startswith("Cap"))}
    assert capabilities["CapEff"] == capabilities["CapPrm"] == 0, capabilities
    if os.geteuid() == 0:                   # root gives up even what a later exec could grant
        assert capabilities["CapBnd"] == 0, capabilities


@pytest.mark.parametrize("namespace", ["1", "0"])
def test_the_child_dies_when_the_loop_is_killed(tmp_path, namespace):
    child_started, daemon_started, token = tmp_path / "child", tmp_path / "daemon", new_token()
    candidate = f"""
        import os, time
        # {token}
        open({str(child_started)!r}, "w").write("")
        if os.fork() == 0:
            os.setsid()
            open({str(daemon_started)!r}, "w").write("")
            time.sleep(600)
        time.sleep(600)
    """
    loop = subprocess.Popen([sys.executable, "-c", LOOP_HELPER, textwrap.dedent(candidate), str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(PROJECT), namespaces.NAMESPACE_ENV: namespace},
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (child_started.exists() and daemon_started.exists()):
        assert time.monotonic() < deadline and loop.poll() is None
        time.sleep(0.05)
    launchers = [pid for pid in marked("autokernel.sandbox.launcher") if _parent(pid) == loop.pid]
    assert len(marked(token)) >= 2 and len(launchers) == 1
    loop.send_signal(signal.SIGKILL)
    loop.wait()
    assert all_gone_within(token) and gone_within(launchers[0])


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return -1


def test_cover_leaves_out_exactly_the_hidden_subtrees(tmp_path):
    for name in ("a/x", "a/secret/y", "b"):
        (tmp_path / name).mkdir(parents=True)
    rules = sandbox.cover([tmp_path], [tmp_path / "a" / "secret"])
    assert sorted(rules) == sorted(str(tmp_path / name) for name in ("a/x", "b"))


@needs_landlock
def test_a_script_in_the_repository_imports_the_repositorys_own_package(tmp_path):
    # bench.py imports autokernel/ from the folder it is in, where the package is not installed
    # (a clone on a GPU machine): Python must be able to list the repository's root for that.
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "workspace").mkdir()
    (repo / "ownpackage").mkdir()
    (repo / "ownpackage" / "__init__.py").write_text("NAME = 'found'\n")
    (repo / "script.py").write_text("import os, ownpackage\nprint(ownpackage.NAME)\n"
                                    "print(sorted(os.listdir('.')))\n"
                                    "try:\n    open('.git/x', 'w')\nexcept OSError:\n    print('git refused')\n")
    result = runner.run_child([sys.executable, str(repo / "script.py")], timeout_s=60, cwd=repo)
    assert result.stdout.splitlines() == ["found", "['.git', 'ownpackage', 'script.py', 'workspace']",
                                          "git refused"], result.stderr


def test_cover_names_the_folders_that_hold_a_hidden_subtree(tmp_path):
    for name in ("a/x", "a/secret/y", "b"):
        (tmp_path / name).mkdir(parents=True)
    listed = []
    sandbox.cover([tmp_path], [tmp_path / "a" / "secret"], listed)
    assert sorted(listed) == sorted([str(tmp_path), str(tmp_path / "a")])


NAME_OWN_THREAD = ("import sys, threading\n"
                   "try:\n"
                   "    open(f'/proc/self/task/{threading.get_native_id()}/comm', 'w').write('cuda-EvtHandlr')\n"
                   "except OSError as exc:\n"
                   "    sys.exit(f'refused: {exc}')\n")


def _name_a_thread_under_the_ruleset(tmp_path, monkeypatch, device_files: list[str]) -> subprocess.CompletedProcess:
    monkeypatch.setattr(sandbox, "gpu_device_files", lambda: device_files)
    ruleset = sandbox.build_ruleset(sandbox.SandboxConfig(command=[], parent_pid=os.getpid(), status_fd=-1),
                                    str(tmp_path))
    try:
        return subprocess.run([sys.executable, "-c", NAME_OWN_THREAD], cwd=tmp_path, capture_output=True, text=True,
                              preexec_fn=ruleset.restrict_self, timeout=60)
    finally:
        ruleset.close()


@needs_landlock
def test_on_a_gpu_machine_the_candidate_may_name_its_threads_as_cuda_does(tmp_path, monkeypatch):
    # CUDA names its threads through /proc/self/task/<tid>/comm; refused that, its initialisation
    # failed (error 304) on an H100 and every bench ran in Triton's interpreter.
    assert _name_a_thread_under_the_ruleset(tmp_path, monkeypatch, ["nvidia0", "nvidiactl"]).returncode == 0
    # Without a GPU nothing needs it, and /proc stays read-only.
    refused = _name_a_thread_under_the_ruleset(tmp_path, monkeypatch, [])
    assert refused.returncode != 0 and "refused" in refused.stderr
