"""The sandbox's pieces leave CUDA usable, its ways out are shut, and the user's-process check works (issue 36).

    python benchmarks/judge.py sandbox [--out DIR]       (DIR defaults to $OUT, else benchmarks/results)

1. What the sandbox cannot give on this machine (sandbox_checks.missing_protections), and whether a candidate's
   process can use the GPU inside it (sandbox_gpu_problem: the network and IPC namespaces, the socket filter and the
   memory cgroup must not hide the GPU).
2. UDP to 127.0.0.1 and a Unix socket by path from inside the sandbox: both refused.
3. A starter through runner.run_bench as the loop judges it (quick): PASS with meaningful timings, its wall time.
4. The user's-process check (autokernel/judge/user_check.py) on three starters at their GPU timing shape (each must
   pass, 2000 calls; on CPU, at their largest interpreter shape), then on every attack of USER_PROCESS_ATTACKS and ALSO_REJECTED_IN_THE_USERS_PROCESS (each must
   be rejected with its message), with the seconds each took.
Stops starting new steps after BUDGET_S. Writes round3_gpu_check.md and prints every line as it goes.
"""

from __future__ import annotations

import argparse
import os
import runpy
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch

from autokernel.judge import runner, user_check
from autokernel.kernel_types import registry
from autokernel.search import sandbox_checks

ROOT = Path(__file__).resolve().parents[2]
ATTACK_DIR = ROOT / "tests" / "attacks"
BUDGET_S = 210.0
STARTERS = ["softmax", "rmsnorm", "matmul"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results"))


def main(args: argparse.Namespace) -> int:
    started, lines, bad = time.monotonic(), [], 0

    def log(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    log(f"# issue 36 on {os.uname().nodename}")
    log(f"- missing protections: {sandbox_checks.missing_protections(ROOT) or 'none'}")
    problem = sandbox_checks.sandbox_gpu_problem(ROOT)
    bad += problem is not None
    log(f"- GPU inside the sandbox: {'usable' if problem is None else 'NOT USABLE: ' + problem}")

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, tempfile.TemporaryDirectory() as folder:
        udp.bind(("127.0.0.1", 0))
        udp.settimeout(0.5)
        path = os.path.join(folder, "listener.sock")
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(path)
        unix.listen(1)
        unix.settimeout(0.5)
        child = runner.run_child([sys.executable, "-c", (
            "import socket\n"
            f"for make, to in ((lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM), ('127.0.0.1', "
            f"{udp.getsockname()[1]})), (lambda: socket.socket(socket.AF_UNIX), {path!r})):\n"
            "    try:\n        s = make(); s.connect(to); s.send(b'x'); print('sent')\n"
            "    except OSError as exc:\n        print('refused', exc.errno)\n")], timeout_s=60, cwd=ROOT)
        try:
            heard = udp.recv(10)
        except socket.timeout:
            heard = None
        try:
            unix.accept()
            accepted = True
        except socket.timeout:
            accepted = False
        unix.close()
    bad += bool(heard) or accepted
    log(f"- from the sandbox: {child.stdout.split()} (UDP heard: {heard!r}, Unix socket accepted: {accepted})")

    begun = time.monotonic()
    result = runner.run_bench(ROOT / "kernels" / "softmax.py", shapes=[], dtype="float16", timeout_s=300, seed=3,
                              extra_args=["--quick"])
    bad += not (result.passed and result.timings_meaningful)
    log(f"- softmax starter through run_bench --quick: {result.correctness} (meaningful timings: "
        f"{result.timings_meaningful}), {result.latency_us} us, wall {time.monotonic() - begun:.1f} s "
        f"{(result.message or '')[:300]}")

    log("\n| kernel | expected | got | seconds | calls | message |\n|---|---|---|---|---|---|")
    expected = runpy.run_path(str(ATTACK_DIR / "expected.py"))
    rejected = {**expected["USER_PROCESS_ATTACKS"], **expected["ALSO_REJECTED_IN_THE_USERS_PROCESS"]}
    cases = [(ROOT / "kernels" / f"{name}.py", name, None) for name in STARTERS]
    cases += [(ATTACK_DIR / f"{name}.py", "softmax", piece) for name, piece in rejected.items()]
    for kernel, kernel_type, piece in cases:
        if time.monotonic() - started > BUDGET_S:
            log(f"| {kernel.stem} | | skipped: past the {BUDGET_S:g} s budget | | | |")
            continue
        begun = time.monotonic()
        kt = registry.get(kernel_type)
        shapes = [] if piece is not None else [kt.timing_shape if torch.cuda.is_available() else kt.cpu_sweep[-1]]
        outcome = user_check.check_kernel(kernel, kernel_type=kernel_type, shapes=shapes, dtype="float16", seed=5)
        ok = outcome.passed if piece is None else (not outcome.passed and piece in outcome.message)
        bad += not ok
        log(f"| {kernel.stem} | {'pass' if piece is None else 'reject: ' + piece} | "
            f"{'pass' if outcome.passed else 'reject'}{'' if ok else ' (WRONG)'} | {time.monotonic() - begun:.1f} | "
            f"{outcome.calls} | {' '.join(outcome.message.split())[:200]} |")
    log(f"\n{bad} problem(s); {time.monotonic() - started:.0f} s in all")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "round3_gpu_check.md").write_text("\n".join(lines) + "\n")
    return 1 if bad else 0

