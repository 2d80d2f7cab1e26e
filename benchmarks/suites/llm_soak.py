"""A night with an unreliable LLM, in minutes: the loop against a local server that misbehaves, killed and resumed.

    python benchmarks/loop.py llm-soak [--minutes 20] [--kills 2] [--agent openai|anthropic] [--seed 0] [--out DIR]

A local server on 127.0.0.1 speaks the real API (tests/fake_llm_server.py; the real SDK client
talks to it through --base-url). It answers each proposal request from the kernel.py in the prompt,
at random, with one of:
  - a well-formed change of one tunable to another of its choices (the honest proposal), as a whole file, a
    unified diff or a search/replace edit, and after a failure sometimes as a fix of the failed candidate;
  - an API error the agent must wait out (429 with Retry-After, 529 overloaded) or a slow reply;
  - a malformed reply (no code block), a reply cut at the token limit, a kernel that does not parse (the agent
    asks again once after each of the first two, with the reason);
  - a cheat: a kernel_fn that returns PyTorch's own result, or one that returns uninitialised memory.
`autokernel optimize` runs on the tiny LLaMA in a fresh clone of this repository (CPU and the
Triton interpreter work: timings mean nothing; what is checked is that the run holds together),
SIGKILLed `--kills` times at random moments and resumed with `--resume` each time. Then:
  - the last run exited 0, and every start after a kill resumed (no "nothing to resume");
  - results.tsv has one row per numbered experiment, numbered 1..N without gaps or repeats;
  - no cheat was ever kept, and every kept row is a PASS;
  - every kept experiment is a commit on the run's branch, and optimized_kernels/ has a file per
    finished job with a keep.
Prints a summary, writes DIR/soak.log and DIR/summary.json; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT  # noqa: E402

from autokernel.agents.edits import unified  # noqa: E402
from autokernel.agents.reply import format_reply  # noqa: E402
from autokernel.search import results  # noqa: E402
from tests.fake_llm_server import FakeLLMServer, ScriptedReply, _is_check  # noqa: E402

CHEAT_MARK = "soak-cheat"
# (weight, behaviour): about half the replies are honest proposals.
BEHAVIOURS = [(30, "tunable"), (10, "tunable_diff"), (10, "tunable_edit"), (8, "rate_limited"), (4, "overloaded"), (4, "slow"), (8, "malformed"),
              (4, "truncated"), (6, "syntax_error"), (8, "cheat_pytorch"), (8, "cheat_uninitialised")]
_KERNEL_BLOCK = re.compile(r"## Current kernel\.py[^\n]*\n\n(`{3,})python\n(.*?)\n\1", re.DOTALL)
_FIX_OFFER = re.compile(r"begin your reply with `FIX OF: exp (\d+)`")


class MisbehavingServer(FakeLLMServer):
    """The fake server, answering every proposal request from its prompt instead of from a script."""

    def __init__(self, seed: int):
        super().__init__()
        self.rng = random.Random(seed)
        self.served: dict[str, int] = {}

    def _next(self, request):
        with self._lock:
            messages = request.body.get("messages", [])
            text = "\n".join(m["content"] if isinstance(m["content"], str) else
                             "".join(part.get("text", "") for part in m["content"]) for m in messages)
            if _is_check(request):
                self.checks.append(request)
                return ScriptedReply(text="OK")
            if not _KERNEL_BLOCK.search(text):
                return ScriptedReply(text="soak server: no kernel.py in the prompt", status=400)
            self.requests.append(request)
            behaviour = self.rng.choices([b for _, b in BEHAVIOURS], weights=[w for w, _ in BEHAVIOURS])[0]
            self.served[behaviour] = self.served.get(behaviour, 0) + 1
            fix = _FIX_OFFER.search(text)
            return reply_for(behaviour, _KERNEL_BLOCK.search(text).group(2), self.rng,
                             fix_of=int(fix.group(1)) if fix and self.rng.random() < 0.5 else None)


def reply_for(behaviour: str, source: str, rng: random.Random, fix_of: int | None = None) -> ScriptedReply:
    if behaviour == "rate_limited":
        return ScriptedReply(text="rate limited", status=429, retry_after="1")
    if behaviour == "overloaded":
        return ScriptedReply(text="overloaded", status=529)
    if behaviour == "malformed":
        return ScriptedReply(text="I think you should make the tiles bigger. Good luck!")
    if behaviour == "truncated":
        return ScriptedReply(text=format_reply("bigger tiles", source)[: len(source) // 2], truncated=True)
    if behaviour == "syntax_error":
        return ScriptedReply(text=format_reply("a kernel that does not parse", source + "\ndef broken(:\n"))
    if behaviour.startswith("cheat"):
        return ScriptedReply(text=format_reply(f"{CHEAT_MARK}: {behaviour}", cheat(source, behaviour)))
    description, changed = change_one_tunable(source, rng)
    if behaviour == "tunable_diff":
        text = f"DESCRIPTION: {description}\n```diff\n{unified(source, changed, 'a/kernel.py', 'b/kernel.py')}\n```\n"
    elif behaviour == "tunable_edit":
        old, new = _changed_lines(source, changed)
        text = f"DESCRIPTION: {description}\n```text\n<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n```\n"
    else:       # a whole file; after a failure, sometimes offered as its fix (the whole file needs no base)
        text = format_reply(description, changed, hypothesis="one tunable at a time", fix_of=fix_of)
    return ScriptedReply(text=text, delay_s=8.0 if behaviour == "slow" else 0.0)


def _changed_lines(before: str, after: str) -> tuple[str, str]:
    """The lines that differ between two texts (between their common first and last lines), each side joined."""
    a, b = before.splitlines(), after.splitlines()
    start = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return "\n".join(a[start:len(a) - end]), "\n".join(b[start:len(b) - end])


def change_one_tunable(source: str, rng: random.Random) -> tuple[str, str]:
    """One TUNABLES value moved to another of its TUNABLE_CHOICES, written back into the source."""
    tree = ast.parse(source)
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("TUNABLES", "TUNABLE_CHOICES"):
            values[node.targets[0].id] = (ast.literal_eval(node.value), node)
    tunables, node = values["TUNABLES"]
    choices = values["TUNABLE_CHOICES"][0]
    name = rng.choice([key for key in tunables if len(choices.get(key, [])) > 1])
    new = rng.choice([value for value in choices[name] if value != tunables[name]])
    lines = source.splitlines()
    start, end = node.lineno - 1, node.end_lineno
    rewritten = {**tunables, name: new}
    lines[start:end] = ["TUNABLES = " + repr(rewritten)]
    return f"{name} {tunables[name]!r} -> {new!r}", "\n".join(lines) + "\n"


def cheat(source: str, behaviour: str) -> str:
    """The kernel with its kernel_fn renamed and a cheating kernel_fn of the same signature after it."""
    tree = ast.parse(source)
    kernel_type = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                       and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "KERNEL_TYPE")
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "kernel_fn")
    signature = ast.unparse(fn.args)
    names = [a.arg for a in fn.args.args]
    if behaviour == "cheat_pytorch":
        body = (f"    from autokernel.kernel_types import references\n"
                f"    return getattr(references, {kernel_type!r})({', '.join(names)})\n")
    else:
        body = (f"    out = _honest_kernel_fn({', '.join(names)})\n"
                f"    return torch.empty_like(out) if isinstance(out, torch.Tensor) else out\n")
    renamed = re.sub(r"^def kernel_fn\(", "def _honest_kernel_fn(", source, count=1, flags=re.MULTILINE)
    return renamed.rstrip("\n") + f"\n\n\ndef kernel_fn({signature}):\n{body}"


def run_soak(args) -> dict:
    out = Path(args.out or tempfile.mkdtemp(prefix="llm-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llm-soak-work-")) / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
    rng = random.Random(args.seed)
    server = MisbehavingServer(args.seed).start()
    key_var = "OPENAI_API_KEY" if args.agent == "openai" else "ANTHROPIC_API_KEY"
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONUNBUFFERED": "1", key_var: "soak-key"}
    base_url = server.openai_base_url if args.agent == "openai" else server.anthropic_base_url
    first = ["optimize", "models/llama.py", "--model-arg", "config=tiny", "--agent", args.agent,
             "--base-url", base_url, "--budget", f"{args.minutes}m", "--tag", "soak", "--max-reverts", "8"]
    starts, exits, kills = [], [], 0
    log_path = out / "soak.log"
    with log_path.open("w") as log:
        command = first
        while True:
            log.write(f"\n===== {' '.join(command)}\n")
            log.flush()
            starts.append(time.monotonic())
            proc = subprocess.Popen([sys.executable, "-m", "autokernel.cli", *command], cwd=work, env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            wait = rng.uniform(60, args.minutes * 60 / (args.kills + 1)) if kills < args.kills else None
            try:
                exits.append(proc.wait(timeout=wait))
                break
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                kills += 1
                log.write(f"\n===== SIGKILL {kills}\n")
                command = ["optimize", "--resume", "--base-url", base_url]
    server.stop()
    return check(work, out, log_path.read_text(), exits, kills, server.served)


def check(work: Path, out: Path, log: str, exits: list[int], kills: int, served: dict) -> dict:
    failures = []
    if exits != [0]:
        failures.append(f"the last run exited {exits}")
    if "nothing to resume" in log.lower():
        failures.append("a --resume found nothing to resume")
    rows = results.read_rows(work / "results.tsv")
    numbers = [int(row["experiment"]) for row in rows]
    if numbers != list(range(1, len(numbers) + 1)):
        failures.append(f"experiments are not numbered 1..N once each: {numbers}")
    kept = [row for row in rows if row["status"] == "keep"]
    for row in kept:
        if CHEAT_MARK in (row["description"] or ""):
            failures.append(f"a cheat was kept: experiment {row['experiment']}: {row['description']}")
        if row["correctness"] != "PASS":
            failures.append(f"experiment {row['experiment']} was kept without a PASS")
    history = subprocess.run(["git", "log", "--format=%s", "autokernel/soak"], cwd=work, capture_output=True,
                             text=True).stdout
    for row in kept:
        if not re.search(rf"^exp {row['experiment']}\b", history, re.MULTILINE):
            failures.append(f"kept experiment {row['experiment']} has no commit on autokernel/soak")
    cheats = [row for row in rows if CHEAT_MARK in (row["description"] or "")]
    summary = {"kills": kills, "experiments": len(rows), "kept": len(kept), "cheats_judged": len(cheats),
               "fixes_judged": sum((row["description"] or "").startswith("fix ") for row in rows),
               "malformed_rows": sum(row["description"] == "malformed reply" for row in rows),
               "cheat_outcomes": sorted({f"{row['correctness']}" for row in cheats}),
               "served": served, "failures": failures, "log": str(out / "soak.log")}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if (work / "results.tsv").exists():
        (out / "results.tsv").write_text((work / "results.tsv").read_text())
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--agent", choices=["openai", "anthropic"], default="openai")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)


def main(args: argparse.Namespace) -> int:
    summary = run_soak(args)
    print(json.dumps(summary, indent=2))
    return 1 if summary["failures"] else 0

