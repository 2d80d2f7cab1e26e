"""Kept kernels run away from the user: verify's and autokernel.optimize's end-to-end checks in a sandboxed child.

A kept kernel is code an LLM wrote. The judge ran it only in its sandbox; the end-to-end check must
too, or an import-time payload reads the user's API keys (os.environ, /proc/self/environ, other
processes' environments) and writes them anywhere, as an outside review showed. So the user's own
process never imports a kept kernel unless the user asks for it (`plug_in`, or the model that
`autokernel.optimize` hands back when AutoKernel's path won):
  - `verify_in_sandbox`: verify.py's work (autokernel/verify/verification.py) runs as `python -m
    autokernel.verify.verify_command ... --sandboxed-fd N --write-to DIR` under runner.run_child: the allow-listed environment (no
    keys), Landlock (no home folder, no network, writes only to its own folders), its own PID
    namespace. Its own lines are shown as they come, and what torch prints in it goes to workspace/torch.log
    (child_lines.py). It reports on a pipe only it holds; this process
    then records the route tables and copies the files it made (by name, from a fixed list) into
    the workspace.
  - `compare_in_sandbox`: autokernel.optimize's comparison on the user's model object, which is
    saved (torch.save) to a private folder and loaded by `python -m autokernel.verify.isolated` in the
    same sandbox; a model class defined in the user's script is found as multiprocessing finds
    it, by importing the script under another name (its `if __name__ == "__main__":` block does
    not run).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Callable

from autokernel.core import paths
from autokernel.core.live import TORCH_LOG
from autokernel.judge import runner
from autokernel.kernel_types.regions import store as region_store
from autokernel.sandbox.child_env import SANDBOXED_CHILD_VARIABLE, remove_tree
from autokernel.verify.child_lines import Split

# The sandboxed children: verify's whole work (verify.py's command), and one comparison on a model object (this
# module's own main, below).
VERIFY_MODULE = "autokernel.verify.verify_command"
COMPARE_MODULE = "autokernel.verify.isolated"
CHILD_TIMEOUT_S = 6 * 3600
# Set for the child where this process sees a GPU: a child that does not (a sandbox piece that breaks CUDA's
# initialization, as the socket filter did on the H200) stops with that error instead of running on the CPU.
GPU_EXPECTED_VARIABLE = "AUTOKERNEL_GPU_EXPECTED"
# What verify's child may hand back as files of the workspace (relative names), and nothing else: the report, and
# with --starters the plan (when it profiled), the starters' manifest and what it names (regions' starters:
# Inductor's code for them, and their region files). Without --starters the child imported the kept kernels, so it
# hands back the report alone: else a kept kernel could plant a starters' manifest naming code of its own, that a
# later plug_in of starter_kernels/ would import into the user's process.
VERIFY_REPORT = "verify_report.json"
VERIFY_FILES = ("optimization_plan.json", "profile_report.json", VERIFY_REPORT)
# regions/*.json: the regions a fresh plan names (a region file is read only under the name its content digests to,
# kernel_types/regions/store.py, so the child cannot change what a region computes).
VERIFY_FILE_PATTERNS = ("starter_kernels/manifest.json", "starter_kernels/*.py", "starter_kernels/regions/*.json",
                        "regions/*.json")
HF_CACHE = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")


class _PipeReader(threading.Thread):
    """Reads one JSON message from a pipe whose write end only the child holds."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""

    def run(self) -> None:
        with os.fdopen(self.fd, "rb") as pipe:
            self.data = pipe.read()

    def message(self):
        try:
            return json.loads(self.data) if self.data else None
        except ValueError:
            return None


def _run_sandboxed(cmd: list[str], *, readable: list[Path], writable: list[Path], on_line=None,
                   env: dict[str, str] | None = None):
    """cmd in the sandbox with a pipe for its answer (its descriptor number appended); (ChildResult, answer or None)."""
    read_end, write_end = os.pipe()
    reader = _PipeReader(read_end)
    reader.start()
    env = {**(env or {}), SANDBOXED_CHILD_VARIABLE: "1"}
    import torch

    if torch.cuda.is_available():    # the child must see it too, or it would run everything in the interpreter
        env[GPU_EXPECTED_VARIABLE] = "1"
    if sys.stdout.isatty():          # the child's output comes through a pipe: keep the user's width and colours
        env.update(COLUMNS=str(shutil.get_terminal_size().columns), FORCE_COLOR="1")
    try:
        child = runner.run_child([*cmd, str(write_end)], timeout_s=CHILD_TIMEOUT_S, cwd=Path.cwd(),
                                 readable=[p for p in readable if p.exists()], writable=writable,
                                 pass_fds=(write_end,), env_extra=env, echo=on_line is None, on_line=on_line,
                                 hidden_in_repo=(".git",))
    finally:
        os.close(write_end)
    reader.join(timeout=runner.KILL_GRACE_S)
    return child, reader.message()


def gpu_hidden() -> str:
    """In the sandboxed child: why the GPU the parent sees is not usable here ('' when it is, or none was seen)."""
    if not os.environ.get(GPU_EXPECTED_VARIABLE):
        return ""
    import torch

    try:
        torch.cuda.init()
        return ""
    except Exception as exc:         # CUDA's own error says what the sandbox broke
        return (f"the GPU this machine has is not usable inside verify's sandbox ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200]}); `python benchmarks/judge.py sandbox` says which protection "
                "is at fault")


def _readable_for(model: str | None, *others: str | Path | None) -> list[Path]:
    """What the child must read beyond the sandbox's default (which hides the home folder): the model's folder
    (its sibling modules too), the Hugging Face cache, the kernels' and the workspace's folders. A folder that
    holds the home folder itself would open all of it (keys kept in files): then only the file is given."""
    home = Path.home().resolve()
    found = [HF_CACHE]
    from autokernel.core.gpu_lock import TIMING_LOCK_VARIABLE

    if os.environ.get(TIMING_LOCK_VARIABLE):        # runs that share a GPU lock this file while they time
        found.append(Path(os.environ[TIMING_LOCK_VARIABLE]))
    for path in ([Path(model).resolve()] if model else []) + [Path(other).resolve() for other in others if other]:
        folder = path.parent if path.is_file() else path
        found.append(path if home == folder or folder in home.parents else folder)
    return found


# ---------------------------------------------------------------------- verify.py
def verify_in_sandbox(argv: list[str], *, model: str | None, workspace: Path, optimized_dir: Path, starters: bool,
                      say: Callable[[str], None] = print) -> int:
    """Run verify.py's work (argv, its own arguments) in the sandbox; record what it measured; its exit code."""
    from autokernel.verify import handover
    from autokernel.verify.verification import EXIT_ERROR, STARTER_MANIFEST_DIR, Outcome

    out = Path(tempfile.mkdtemp(prefix="autokernel-verify-"))
    # The child's own lines are shown; what torch, Inductor and Triton print goes to the workspace's log.
    split = Split(workspace / TORCH_LOG, show=lambda line: print(line, flush=True),
                  show_error=lambda line: print(line, file=sys.stderr, flush=True))
    try:
        def command(*more: str) -> list[str]:
            return paths.module_command(VERIFY_MODULE, *argv, *more, "--write-to", str(out), "--sandboxed-fd")

        readable = _readable_for(model, workspace, optimized_dir)
        child, answer = _run_sandboxed(command(), readable=readable, writable=[out], on_line=split)
        try:
            outcome = Outcome.from_json(answer)
        except ValueError:
            # The child died with our kernels in it (a crash, a device-side assert, its time limit): the kernels are
            # dropped with its last lines as the reason, and PyTorch's own paths are compared in a fresh child, so
            # that the user still gets a verdict.
            crashed = (f"the check in the sandbox {child.exit_description()} without a result"
                       + (" (it ran past its time limit)" if child.timed_out else "") + f": {_tail(child.stderr)}")
            name = paths.command_name("verify.py")
            print(f"{name}: {crashed}\n{name}: comparing PyTorch's own paths alone, in a fresh sandbox",
                  file=sys.stderr)
            child, answer = _run_sandboxed(command("--pytorch-only"), readable=readable, writable=[out],
                                           on_line=split)
            try:
                outcome = Outcome.from_json(answer)
            except ValueError:
                print(f"{name}: PyTorch's own paths alone {child.exit_description()} without a result too: "
                      f"{_tail(child.stderr)}", file=sys.stderr)
                return EXIT_ERROR
            _record_crash(outcome, crashed, out, say)
        workspace.mkdir(parents=True, exist_ok=True)
        for name in outcome.made:
            _hand_back(out, workspace, name, starters=starters)
        if outcome.route_tables:        # the manifest verify was asked about, whatever the child says
            folder = workspace / STARTER_MANIFEST_DIR if starters else optimized_dir
            handover.record_route_tables(folder / paths.MANIFEST_NAME, outcome.route_tables)
        if "verify_report.json" in outcome.made:
            say(f"wrote {workspace / 'verify_report.json'}")
        return outcome.exit_code
    finally:
        split.close()
        if split.logged:
            say(f"torch's own output ({split.logged} lines) is in {split.log_path}")
        remove_tree(out)          # the sandboxed child wrote it: no link it planted is followed


def _tail(stderr: str, lines: int = 6) -> str:
    """The last lines a child wrote to stderr, joined on one line: a crash's reason."""
    kept = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    return " / ".join(kept[-lines:])[-1200:] or "(it wrote nothing to stderr)"


def _record_crash(outcome, crashed: str, out: Path, say: Callable[[str], None]) -> None:
    """The verdict of PyTorch's paths alone, with every kernel dropped for the crash: in its report and exit code."""
    from autokernel.verify.containment import SANDBOX, Dropped
    from autokernel.verify.verification import exit_code

    if outcome.report is None:
        return
    outcome.report.dropped.insert(0, Dropped(SANDBOX, "every kernel", crashed).to_json())
    outcome.exit_code = exit_code(outcome.report)
    if VERIFY_REPORT in outcome.made:
        (out / VERIFY_REPORT).write_text(json.dumps(outcome.report.to_json(), indent=2) + "\n")
    say(f"verdict with every kernel dropped: {outcome.report.verdict.summary}")


def _hand_back(out: Path, workspace: Path, name: str, *, starters: bool) -> bool:
    """Copy the child's file `name` from out into the workspace, if it may hand it back; whether it was copied.
    The child owns `out`: a folder of it may be a link to anywhere this process can read (a folder the child's
    Landlock hides, the home folder's), so the file must resolve inside `out`; and what it lands on must resolve
    inside the workspace (a link there would write elsewhere)."""
    if not _may_hand_back(name, starters=starters):
        return False
    source, target = out / name, workspace / name
    if source.is_symlink() or not source.is_file() or not _inside(source, out):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or not _inside(target, workspace):
        return False
    shutil.copyfile(source, target)
    return True


def _inside(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


def _may_hand_back(name: str, *, starters: bool) -> bool:
    if not isinstance(name, str):
        return False
    if not starters:
        return name == VERIFY_REPORT
    parts = Path(name).parts
    return ".." not in parts and (name in VERIFY_FILES or any(fnmatch.fnmatchcase(name, pattern)
                                                              and "/" not in name[len(pattern.split("*")[0]):]
                                                              for pattern in VERIFY_FILE_PATTERNS))


# ---------------------------------------------------------------------- autokernel.optimize
class SandboxedCheckFailed(RuntimeError):
    """The comparison could not run in the sandbox; the message says why."""


def compare_in_sandbox(model, inputs: tuple, optimized_dir: Path, *, on_gpu: bool, compile_backend: str | None,
                       log: Callable[[str], None]) -> dict:
    """handover.compare on the user's model object, in the sandbox; the route tables are recorded here."""
    import torch

    from autokernel.verify import handover

    folder = Path(tempfile.mkdtemp(prefix="autokernel-compare-"))
    try:
        try:
            torch.save({"model": model, "inputs": inputs}, folder / "payload.pt")
        except Exception as exc:   # a model pickle cannot save (a lambda, a local class...)
            raise SandboxedCheckFailed(f"the model could not be saved for the sandboxed check ({exc})") from None
        main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
        cmd = paths.module_command(COMPARE_MODULE, "--payload", str(folder / "payload.pt"),
                                   "--optimized-dir", str(optimized_dir), "--main", main,
                                   "--compile-backend", compile_backend or "", *(["--on-gpu"] if on_gpu else []), "--fd")
        # This process's import path, as multiprocessing passes it on: the model's classes are found where they were;
        # and the folders it reads regions from (the kept kernels may be regions of the model).
        search_path = [entry for entry in sys.path if entry and os.path.isdir(entry)]
        regions = [str(found) for found in region_store.folders() if found.is_dir()]
        child, answer = _run_sandboxed(
            cmd, readable=_readable_for(main or None, folder, optimized_dir, *search_path, *regions), writable=[],
            on_line=log, env={"PYTHONPATH": os.pathsep.join(search_path),
                              region_store.FOLDERS_VARIABLE: os.pathsep.join(regions)})
        if not isinstance(answer, dict) or not isinstance(answer.get("compared"), dict):
            raise SandboxedCheckFailed(f"the sandboxed check {child.exit_description()} without a result: "
                                       f"{child.stderr.strip().splitlines()[-1:] or ''}")
        if answer.get("tables"):
            try:
                handover.record_route_tables(optimized_dir / paths.MANIFEST_NAME, answer["tables"])
            except ValueError as exc:        # the child (a kept kernel runs in it) sent what is not route tables
                raise SandboxedCheckFailed(f"the sandboxed check handed back no route tables ({exc})") from None
        return _checked_comparison(answer["compared"])
    finally:
        remove_tree(folder)


def _checked_comparison(compared: dict) -> dict:
    """The comparison the child sent, with the figures autokernel.optimize reads checked (a kept kernel runs in the
    child and may have written it): SandboxedCheckFailed, so PyTorch's path is handed back, for anything else."""
    from autokernel.verify.report_record import Verdict
    from autokernel.verify.variants import VARIANTS

    checked, verdict = compared.get("checked"), compared.get("verdict")
    try:
        usable = (isinstance(checked, dict) and type(checked.get("passed")) is bool
                  and isinstance(checked.get("max_error"), (int, float))
                  and isinstance(compared.get("tolerance"), (int, float)) and isinstance(verdict, dict)
                  and Verdict(**verdict).use in VARIANTS and isinstance(verdict["summary"], str)
                  and isinstance(verdict["use_code"], str) and type(verdict["faster"]) is bool
                  and type(verdict["batch_norm_folding"]) is bool
                  and type(verdict.get("linear_concat")) is bool)
    except TypeError:              # a verdict without the fields a Verdict has, or with others
        usable = False
    if not usable:
        raise SandboxedCheckFailed("the sandboxed check handed back a comparison that is not one")
    return compared


def _adopt_main(script: str) -> None:
    """Make the user's script importable as __main__, as multiprocessing's spawn does, without running its main block."""
    import runpy
    import types

    namespace = runpy.run_path(script, run_name="__mp_main__")
    module = types.ModuleType("__mp_main__")
    module.__dict__.update(namespace)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def _load_payload(path: str, script: str):
    import torch

    try:
        return torch.load(path, weights_only=False)
    except (AttributeError, ModuleNotFoundError):
        if not script:
            raise
        _adopt_main(script)          # the model's class is defined in the user's script
        return torch.load(path, weights_only=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="autokernel.optimize's end-to-end check, in the sandbox")
    parser.add_argument("--payload", required=True)
    parser.add_argument("--optimized-dir", required=True)
    parser.add_argument("--main", default="")
    parser.add_argument("--compile-backend", default="")
    parser.add_argument("--on-gpu", action="store_true")
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    from autokernel.core import interpreter
    from autokernel.verify import handover

    interpreter.choose()
    payload = _load_payload(args.payload, args.main)
    compared, tables = handover.compare(payload["model"], payload["inputs"], args.optimized_dir, on_gpu=args.on_gpu,
                                        compile_backend=args.compile_backend or None, log=print)
    with os.fdopen(args.fd, "w") as answer:
        json.dump({"compared": compared, "tables": tables}, answer, default=str)
    return 0


if __name__ == "__main__":
    code = main()
    from autokernel.core import teardown      # it has answered on its pipe: no teardown to wait for

    teardown.answered_exit(code)
