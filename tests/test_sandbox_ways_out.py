"""Ways out of the sandbox the red team found (UDP, Unix sockets by path, the ssh-agent, System V IPC that outlives the
run, memory held in a memfd), each closed, or said missing where the machine cannot close it.

Each protection is checked twice: with a plain child of runner.run_child (fast: what the sandbox itself does), and
with an attack kernel of tests/attacks (SANDBOX_ATTACKS) judged through runner.run_bench as the loop judges it. The
checks are on the effect (a listener that hears nothing, a key /proc/sysvipc does not list), never on the attack's
own word; where the launcher reports a protection missing, the check says so instead of passing.
"""

import os
import runpy
import socket
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from autokernel.judge import runner
from autokernel.sandbox import landlock
from autokernel.sandbox.child_env import caches_for

ROOT = Path(__file__).resolve().parents[1]
ATTACK_DIR = ROOT / "tests" / "attacks"
_EXPECTED = runpy.run_path(str(ATTACK_DIR / "expected.py"))
SHM_KEY = 0x41554B31        # tests/attacks/sysv_shm_outlives_the_run.py's KEY (running that file would make one here)


def _child(code: str, **kwargs) -> runner.ChildResult:
    return runner.run_child([sys.executable, "-c", textwrap.dedent(code)], timeout_s=60, cwd=ROOT, **kwargs)


def _missing(result: runner.ChildResult, protection: str) -> bool:
    return any(line.startswith(protection) for line in result.sandbox.get("missing", []))


def _keys(kind: str) -> set[int]:
    """The keys of the machine's System V objects of a kind ("shm", "msg"), as this process's namespace lists them."""
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines if line.split()}


@pytest.fixture
def udp_listener():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        yield listener


def _heard(listener: socket.socket) -> bytes | None:
    try:
        return listener.recv(100)
    except (socket.timeout, BlockingIOError):
        return None


@pytest.fixture
def unix_listener(tmp_path):
    path = tmp_path / "listener.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        listener.settimeout(0.5)
        yield path, listener


def _accepted(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
        return True
    except socket.timeout:
        return False


# ---------------------------------------------------------------------- what the sandbox does, with plain children
def test_no_udp_packet_reaches_a_listener_on_localhost(udp_listener):
    port = udp_listener.getsockname()[1]
    result = _child(f"""
        import socket
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"secret", ("127.0.0.1", {port}))
        except OSError as exc:
            print("refused", exc.errno)
    """)
    heard = _heard(udp_listener)
    assert heard is None or _missing(result, "network namespace"), heard
    assert "refused" in result.stdout or _missing(result, "network namespace"), result.stdout + result.stderr


def test_no_unix_socket_by_path_or_abstract_name_can_be_reached(unix_listener):
    path, listener = unix_listener
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as abstract:
        abstract.bind("\0autokernel-test-" + os.urandom(4).hex())
        abstract.listen(1)
        abstract.settimeout(0.5)
        result = _child(f"""
            import socket
            for address in ({str(path)!r}, {abstract.getsockname()!r}):
                try:
                    socket.socket(socket.AF_UNIX).connect(address)
                    print("connected")
                except OSError as exc:
                    print("refused", exc.errno)
        """)
        assert not _accepted(abstract) or _missing(result, "network namespace")
    assert not _accepted(listener) or _missing(result, "socket filter"), result.stdout
    # socketpair, the judge's channel to its worker, still works: a pair reaches only its own two ends.
    pair = _child("import socket; a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())")
    assert pair.stdout.strip() == "ok", pair.stderr


def test_system_v_objects_die_with_the_run():
    key = 0x41554B32
    result = _child(f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.shmget({key}, 1 << 20, 0o1000 | 0o666), libc.msgget({key}, 0o1000 | 0o666))
    """)
    made = [int(word) for word in result.stdout.split()]
    assert len(made) == 2 and min(made) >= 0, result.stdout + result.stderr     # it could make them, inside
    assert (key not in _keys("shm") and key not in _keys("msg")) or _missing(result, "IPC namespace")


def test_memory_held_in_a_memfd_counts_against_the_cap():
    result = _child("""
        import os
        fd, chunk = os.memfd_create("held"), b"x" * (16 << 20)
        for _ in range(64):
            os.write(fd, chunk)
        print("held 1 GiB")
    """, memory_limit_mb=256)
    if _missing(result, "memory cgroup"):
        pytest.skip("no memory cgroup on this machine: " + result.sandbox["missing"][0])
    assert "held 1 GiB" not in result.stdout
    assert result.stopped and "memory" in result.stopped and "cgroup" in result.stopped, result.stopped


def test_the_agent_variable_is_not_passed_and_agent_folders_are_unreadable(monkeypatch):
    folder = tempfile.mkdtemp(prefix="ssh-", dir="/tmp")
    try:
        Path(folder, "agent.1").write_text("")
        monkeypatch.setenv("SSH_AUTH_SOCK", os.path.join(folder, "agent.1"))
        result = _child(f"""
            import os
            print("set" if "SSH_AUTH_SOCK" in os.environ else "unset")
            try:
                os.listdir({folder!r})
                print("listed")
            except OSError:
                print("refused")
        """)
    finally:
        Path(folder, "agent.1").unlink()
        os.rmdir(folder)
    seen = result.stdout.split()
    assert seen[0] == "unset"
    assert seen[1] == "refused" or not runner.filesystem_confined()


# ---------------------------------------------------------------------- the attack kernels, judged as the loop judges
@pytest.fixture
def judged(tmp_path, monkeypatch):
    """The attack judged by the sandbox alone: the source check, the first line, would refuse each at load (its
    imports: socket, ctypes, os), so it is off here to show the second line holds (tests/test_source_check.py
    shows the first)."""
    from autokernel.judge import source_check

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(source_check.SOURCE_CHECK_ENV, "0")

    def judge(name: str):
        kernel = ATTACK_DIR / f"{name}.py"
        result = runner.run_bench(kernel, shapes=[], dtype="float16", timeout_s=300, seed=7, extra_args=["--quick"])
        probe = caches_for(kernel) / "probe"
        return result, probe.read_text().splitlines() if probe.exists() else []
    return judge


@pytest.mark.slow
def test_attack_udp_to_localhost(judged, udp_listener, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_ATTACK_PORT", str(udp_listener.getsockname()[1]))
    result, notes = judged("udp_to_localhost")
    assert _heard(udp_listener) is None
    assert result.correctness == "PASS", result.message
    assert notes == ["udp refused: [Errno 101] Network is unreachable"], notes


@pytest.mark.slow
def test_attack_unix_socket_by_path(judged, unix_listener, monkeypatch):
    path, listener = unix_listener
    monkeypatch.setenv("AUTOKERNEL_ATTACK_SOCKET", str(path))
    result, notes = judged("unix_socket_by_path")
    assert not _accepted(listener)
    assert result.correctness == "PASS", result.message
    assert notes == ["unix socket refused: [Errno 13] Permission denied"], notes


@pytest.mark.slow
def test_attack_ssh_agent_signs(judged, monkeypatch):
    folder = tempfile.mkdtemp(prefix="ssh-", dir="/tmp")
    path = os.path.join(folder, f"agent.{os.getpid()}")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as agent:
            agent.bind(path)
            agent.listen(1)
            agent.settimeout(0.5)
            monkeypatch.setenv("SSH_AUTH_SOCK", path)
            monkeypatch.setenv("AUTOKERNEL_ATTACK_AGENT", path)
            result, notes = judged("ssh_agent_signs")
            assert not _accepted(agent)
    finally:
        Path(path).unlink(missing_ok=True)
        os.rmdir(folder)
    assert result.correctness == "PASS", result.message
    assert notes[0] == "SSH_AUTH_SOCK unset" and "agent folder listed" not in notes
    assert "agent refused: [Errno 13] Permission denied" in notes and not any("answered" in n for n in notes), notes
    if landlock.abi() >= 1 and runner.filesystem_confined():
        assert "agent folder refused" in notes, notes


@pytest.mark.slow
def test_attack_sysv_shm_outlives_the_run(judged):
    result, notes = judged("sysv_shm_outlives_the_run")
    assert result.correctness == "PASS", result.message
    shm, msg = (int(word) for word in notes[0].split()[1::2])
    assert shm >= 0 and msg >= 0, notes                     # made, inside the run's namespace
    assert SHM_KEY not in _keys("shm") and SHM_KEY not in _keys("msg")


@pytest.mark.slow
def test_attack_memfd_past_the_memory_cap(judged, monkeypatch):
    from autokernel.search import sandbox_checks

    if any(line.startswith("memory cgroup") for line in sandbox_checks.missing_protections(ROOT)):
        pytest.skip("no memory cgroup on this machine")
    # The cap of the whole tree (the judge and its worker, about 1 GiB of PyTorch between them), below the 4 GiB the
    # kernel writes into its memfd.
    monkeypatch.setattr(runner, "default_memory_limit_mb", lambda: 2048)
    result, notes = judged("memfd_past_the_memory_cap")
    assert result.correctness != "PASS" and "memfd filled" not in notes, (result.correctness, result.message)
    assert "memory cgroup" in result.message, result.message


def test_a_protection_turned_off_is_named_as_missing_and_the_run_says_so(udp_listener, monkeypatch):
    from autokernel.search import sandbox_checks
    from autokernel.sandbox import namespaces

    monkeypatch.setenv(namespaces.NETWORK_ENV, "0")
    port = udp_listener.getsockname()[1]
    result = _child(f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', "
                    f"{port}))")
    assert _heard(udp_listener) == b"x", "without the namespace the packet arrives: the test can see one"
    assert _missing(result, "network namespace") and _missing(result, "socket filter"), result.sandbox
    missing = sandbox_checks.missing_protections(ROOT)
    assert [line.split(" (")[0] for line in missing if "AUTOKERNEL_SANDBOX_NET=0" in line] == ["network namespace",
                                                                                           "socket filter"]


def test_the_source_check_refuses_every_way_out_before_it_runs():
    """The first line: each of these kernels is refused at load for what it imports (where a GPU keeps the socket
    filter off, it is the only line against a Unix socket by path)."""
    from autokernel.judge import source_check

    for name in _EXPECTED["SANDBOX_ATTACKS"]:
        assert source_check.problems((ATTACK_DIR / f"{name}.py").read_text()), name
