"""The loop's side of the user's-process check: before a candidate is kept, it runs as in the user's own process.

bench.py's PASS says the kernel was right where the judge called it. `check_kernel` starts
autokernel/judge/user_process.py (see there for every check) through the one child-process runner
(autokernel/judge/runner.run_child: the same sandbox, no secrets, everything it starts killed at its end),
with an ordinary-looking HOME and TMPDIR of its own (a folder named like a user's, not like the
judge's), no compiler-cache variables, its config on a pipe (so its command line names no kernel) and
its verdict on another, marked with a nonce it read before the kernel was imported. `keep_only_if_checked`
is what the loops call on a result they are about to keep: the result as it was, or a FAIL that says
what went wrong in the user's process.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from autokernel.core import paths
from autokernel.core.contracts import FAIL, TIMEOUT, BenchResult
from autokernel.kernel_types.regions import store as region_store
from autokernel.sandbox.child_env import CACHE_FOLDERS, remove_tree

MODULE = "autokernel.judge.user_process"
STAGE = "user's process"
# bench.result.extra's key on a kept result: what the check said (the parallel loop keeps only results that carry it).
CHECKED = "users_process_check"
# Up to ~30 s under Triton's interpreter at a job's shapes, a few seconds on a GPU; compiling a CUDA C++ kernel file
# again takes about a minute.
TIMEOUT_S = 300.0
MESSAGE_CHARS = 1500
# Variables of the judge's sandbox a user's process does not have (run_child leaves out those set to None). Not
# PYTHONDONTWRITEBYTECODE: the sandbox's launcher, which runs before any confinement, must write no bytecode into the
# repository either (the check's process takes it out of its own environment).
JUDGE_ONLY_VARIABLES = (*CACHE_FOLDERS, "XDG_CACHE_HOME")


@dataclass
class CheckOutcome:
    passed: bool
    message: str           # why it failed ("" on a pass)
    calls: int = 0
    timed_out: bool = False


def _user_name() -> str:
    name = re.sub(r"[^a-z0-9_-]", "", (os.environ.get("USER") or os.environ.get("LOGNAME") or "").lower())
    return name if name and name != "root" else "user"


def check_kernel(kernel_path: str | Path, *, kernel_type: str, shapes: Iterable[dict], dtype: str, seed: int,
                 timeout_s: float = TIMEOUT_S, readable: Iterable[str | Path] = ()) -> CheckOutcome:
    """Run the kernel file through the user's-process check in the sandbox; what it found."""
    from autokernel.judge import runner

    base = tempfile.mkdtemp()                  # /tmp/tmpXXXXXXXX: a name any program's temporary folder could have
    home, tmpdir = os.path.join(base, "home", _user_name()), os.path.join(base, "tmp")
    os.makedirs(home)
    os.makedirs(tmpdir)
    nonce = secrets.token_hex(16)
    config = json.dumps({"kernel": str(Path(kernel_path).resolve()), "kernel_type": kernel_type,
                         "shapes": list(shapes), "dtype": dtype, "seed": int(seed), "nonce": nonce,
                         "home": home, "tmpdir": tmpdir}).encode()
    config_read, config_write = os.pipe()
    verdict_read, verdict_write = os.pipe()
    verdict = runner._VerdictReader(verdict_read)
    verdict.start()
    writer = threading.Thread(target=_write_all, args=(config_write, config), daemon=True)
    writer.start()                             # a config past the pipe's buffer would block here otherwise
    try:
        # The region folders are named to the child: it works in a folder of its own, so a pip-installed run's
        # workspace/regions (in the user's project, found here through the work folder) is nowhere it would look.
        regions = [str(folder) for folder in region_store.folders() if folder.is_dir()]
        readable = [*map(str, readable), str(Path(kernel_path).resolve().parent), *regions]
        child = runner.run_child(paths.module_command(MODULE, str(config_read), str(verdict_write)),
                                 timeout_s=timeout_s, cwd=paths.ROOT, readable=readable, writable=[base],
                                 pass_fds=(config_read, verdict_write),
                                 env_extra={"HOME": home, "TMPDIR": tmpdir, "TMP": tmpdir, "TEMP": tmpdir,
                                            region_store.FOLDERS_VARIABLE: os.pathsep.join(regions) or None,
                                            **{name: None for name in JUDGE_ONLY_VARIABLES}})
    finally:
        os.close(config_read)
        os.close(verdict_write)
        writer.join(timeout=runner.KILL_GRACE_S)     # ends once the child is gone, read or not
        remove_tree(base)
    verdict.join(timeout=runner.KILL_GRACE_S)
    return _outcome("" if verdict.is_alive() else verdict.text(), child, nonce, timeout_s)


def _write_all(fd: int, data: bytes) -> None:
    try:
        with open(fd, "wb") as pipe:
            pipe.write(data)
    except OSError:
        pass                                   # the child died before reading: its verdict says so


def _outcome(written: str, child, nonce: str, timeout_s: float) -> CheckOutcome:
    """The check's verdict, only from lines with this run's nonce; anything else is a failure."""
    from autokernel.judge.runner import last_lines

    if child.timed_out:
        return CheckOutcome(False, f"it ran past its {timeout_s:g} s limit and was killed", timed_out=True)
    if child.leftover_processes:
        return CheckOutcome(False, f"the kernel left {child.leftover_processes} process(es) running")
    verdicts = []
    for line in written.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("nonce") == nonce:
            verdicts.append(record)
    if len(verdicts) != 1:
        tail = last_lines(child.stderr, 8) or last_lines(child.stdout, 8)
        return CheckOutcome(False, f"the check's process {child.exit_description()} without its verdict"
                                   + (f":\n{tail}" if tail else ""))
    record = verdicts[0]
    if record.get("passed") is True and child.returncode == 0:
        return CheckOutcome(True, "", int(record.get("calls") or 0))
    return CheckOutcome(False, str(record.get("message") or f"the check's process {child.exit_description()}"))


def keep_only_if_checked(result: BenchResult, kernel_path: str | Path, *, kernel_type: str, shapes: Iterable[dict],
                         dtype: str, seed: int, readable: Iterable[str | Path] = (),
                         timeout_s: float = TIMEOUT_S) -> BenchResult:
    """A result about to be kept: as it was (marked as checked) when the check passes, else a FAIL saying why (a
    TIMEOUT when the check ran past timeout_s: the loop cuts that limit to its budget, and such a cut is no verdict)."""
    from autokernel.judge.runner import synthesized_result

    outcome = check_kernel(kernel_path, kernel_type=kernel_type, shapes=shapes, dtype=dtype, seed=seed,
                           readable=readable, timeout_s=timeout_s)
    if outcome.passed:
        result.extra[CHECKED] = f"passed: {outcome.calls} calls"
        return result
    # What failed comes first: results.tsv's short reason and the terminal's line keep a message's start.
    message = (f"{outcome.message[:MESSAGE_CHARS]}\n(in a user's process: a fresh one, without the judge, calling "
               f"kernel_fn hundreds of times and holding what it gave and got)")
    failed = synthesized_result(TIMEOUT if outcome.timed_out else FAIL, message, kernel_type=kernel_type, dtype=dtype,
                                seed=seed)
    failed.failed_stage = STAGE
    return failed


def check_source(result: BenchResult, source: str, job, *, seed: int, timeout_s: float = TIMEOUT_S) -> BenchResult:
    """keep_only_if_checked for a job's kernel given as its source (written to a folder of its own, removed after).

    The parallel loop's safety net: its judge workers check what beats the best they were sent (would_keep), and a
    job's best only improves, so a result it keeps unchecked would be a bug; it is checked here instead."""
    folder = tempfile.mkdtemp(prefix="autokernel-candidate-")
    try:
        kernel = Path(folder) / "kernel.py"
        kernel.write_text(source)
        return keep_only_if_checked(result, kernel, kernel_type=job.kernel_type, shapes=job.shapes, dtype=job.dtype,
                                    seed=seed, timeout_s=timeout_s)
    finally:
        remove_tree(folder)


def was_checked(result: BenchResult) -> bool:
    return str(result.extra.get(CHECKED, "")).startswith("passed")


def needs_check(result: BenchResult) -> bool:
    """A PASS of the project's judge (runner.JUDGED_BY) not checked yet; a test's stand-in judge's verdict is about
    no kernel a user would run, and is kept as it is."""
    from autokernel.judge.runner import JUDGED_BY

    return result.passed and result.extra.get(JUDGED_BY) == "bench.py" and not was_checked(result)


def would_keep(result: BenchResult, best_us: float | None, noise: float | None) -> bool:
    """search/policy.is_improvement's rule, for a judge worker that has the job's best and noise, not the loop."""
    return bool(needs_check(result) and result.latency_us and best_us and best_us / result.latency_us > 1 + (noise or 0.0))
