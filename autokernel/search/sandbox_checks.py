"""What the sandbox means on this machine, said before a run: can candidates use the GPU, and what is given up.

session.py asks these before profiling: a sandbox that hides the GPU would turn a night of benches
into Triton-interpreter timings, and a machine without Landlock (or AUTOKERNEL_SANDBOX_FS=0) gives
up the confinement of files, which the user must be told plainly, as must every other protection the
machine cannot give (missing_protections).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from autokernel.judge.candidate.worker_process import CONFINE_ENV
from autokernel.judge.runner import last_lines, run_child
from autokernel.sandbox.namespaces import NAMESPACE_ENV, NETWORK_ENV

GPU_PROBE_TIMEOUT_S = 120


def unconfined_note() -> str:
    """What a run gives up where candidates' files are not confined: said at its start, everything, plainly."""
    from autokernel.sandbox import landlock

    version = landlock.abi()
    why = f"{CONFINE_ENV}=0" if version >= 1 else "no Landlock in this kernel"
    network = (f"TCP connections and signals out of the sandbox stay refused (Landlock ABI {version})" if version >= 6
               else f"TCP connections stay refused (Landlock ABI {version})" if version >= 4
               else "they can also open network connections and signal your processes")
    return (f"the sandbox does not confine the candidates' files here ({why}): they can read what you can (your "
            "home folder, keys kept in files) and write what you can (your files, this Python's packages such as "
            "torch and Triton, the compiler caches). Only the repository and the loop's own files are checked and "
            f"restored after each bench, and the judge's own files against the run's digest; {network}")


GPU_PROBE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"
PROBE_TIMEOUT_S = 60
# What the probe found, by the sandbox's switches (the AUTOKERNEL_* variables) it ran under: the protections depend on
# the machine and those switches, not on the run, so a process that starts many runs (the Python API, the loop's
# tests) starts one probe child, not one a run.
_found: dict[tuple, list[str]] = {}


def missing_protections(cwd: str | Path) -> list[str]:
    """The sandbox's protections this machine cannot give (a network or IPC namespace, the socket filter, the memory
    cgroup), each with why and what it leaves open, as the launcher reports them for a child that does nothing."""
    switches = tuple(sorted((name, value) for name, value in os.environ.items() if name.startswith("AUTOKERNEL_")))
    if switches not in _found:
        child = run_child([sys.executable, "-c", "pass"], timeout_s=PROBE_TIMEOUT_S, cwd=cwd)
        if "missing" not in child.sandbox:         # no report from the launcher: asked again next time
            return []
        _found[switches] = list(child.sandbox["missing"] or [])
    return list(_found[switches])


def sandbox_gpu_problem(cwd: str | Path) -> str | None:
    """Why the sandbox hides this machine's GPU from candidates, or None (also None with no GPU here).

    Without this check a sandbox that hides the GPU makes every bench run in Triton's interpreter:
    an H100 night of 8-second "timings" that mean nothing, each labelled as such but none failing.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    child = run_child([sys.executable, "-c", GPU_PROBE], timeout_s=GPU_PROBE_TIMEOUT_S, cwd=cwd)
    if child.returncode == 0:
        return None
    detail = last_lines(child.stderr, 3) or child.exit_description()
    return ("this machine has a CUDA GPU, but a process in the candidates' sandbox cannot use it, so every "
            f"kernel would be judged in Triton's interpreter ({detail.strip()}). Set {CONFINE_ENV}=0 to run "
            f"candidates without the file-system confinement, {NAMESPACE_ENV}=0 without their PID namespace, or "
            f"{NETWORK_ENV}=0 without their network namespace and socket filter (the other checks stay), and report "
            "this machine's kernel version and GPU driver")
