"""The optimization loop's progress view: a rich Live panel on a terminal, plain log lines anywhere else.

The loop reports three things: `update(status)` with a snapshot of where it is, `phase(text)` for
what it is doing right now (profiling, baseline, experiment N: asking the agent, judging and the
judge's current stage), and `log(message)` for an event worth keeping (an experiment's verdict, a
kernel saved). On a terminal the snapshot is a panel redrawn in place with the events scrolling
above it; in CI or a log file only the events are printed, one timestamped line each, so the output
stays greppable. Records of the `autokernel` loggers (the agents' token and cost lines, retries)
become events too.

`quiet_native_output(path)` sends whatever the process itself writes to its stdout and stderr
(torch's profiler prints from C++) to a file while it is active; the view keeps its own copy of
the terminal, so the panel still draws. `torch_chatter_to(path)` sends only Python's warnings and
torch's logging (Inductor's autotuning errors and their tracebacks) there, for a whole run whose
own lines stay on the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


@dataclass
class LoopStatus:
    """A snapshot of the loop for the view."""
    phase: str = "starting"               # "profiling", "baseline 1_softmax (run 1 of 2)", "exp 7: judging"
    kernel: str = "-"                     # "rank 1 matmul (job 1 of 3)"
    experiments: int = 0                  # this run's experiments (resumed sessions included), baselines not
    kernel_experiments: int = 0           # experiments on the current kernel
    best_speedup: float | None = None     # current kernel: baseline latency / best latency
    best_vs_pytorch: float | None = None
    best_note: str | None = None          # shown instead of the speedups where they mean nothing (the loop sets it)
    last_result: str = "-"
    llm_tokens: int = 0
    llm_cached_tokens: int = 0            # of llm_tokens: served by the provider's prompt cache
    llm_reasoning_tokens: int = 0         # of llm_tokens: reasoning or thinking
    cost_usd: float = 0.0
    cost_complete: bool = True            # False when some calls went to a model without a price
    deadline: float | None = None         # time.monotonic() at which the run's budget is spent
    gpus: str = "-"                       # the run's one rate: overall and per GPU, and idle time (throughput_line)
    jobs: str = "-"                       # with several GPUs, the jobs in flight and their GPUs (lanes_line)
    phase_started: float = field(default_factory=time.monotonic)

    def show_job(self, experiments: int, progress, *, deadline: float) -> None:
        """The numbers of the kernel being optimized (progress: its JobProgress)."""
        self.experiments, self.kernel_experiments, self.deadline = experiments, progress.experiments, deadline
        self.best_speedup = progress.gain()
        self.best_vs_pytorch = progress.best.speedup_vs_best or progress.best.bench.speedup_vs_pytorch

    def time_left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


RATE_AFTER_S = 60.0      # a rate from the first seconds of a run means nothing


def throughput_line(throughput, unsaved_wall_s: float = 0.0) -> str:
    """The run's one rate (experiments per hour, overall and per GPU, over the run's loop time, resumes included)
    and the time each GPU sat idle (a throughput.Throughput); no rate before a minute of loop time."""
    wall = throughput.wall_s + unsaved_wall_s
    if not throughput.gpus or wall <= 0:
        return "-"
    hours = wall / 3600
    early = wall < RATE_AFTER_S
    each = not early and len(throughput.gpus) > 1       # one worker's rate is the overall one: said once
    parts = [f"{label} {f'{use.experiments / hours:.0f}/h ' if each else ''}idle "
             f"{format_duration(max(0.0, wall - use.busy_s))}" for label, use in sorted(throughput.gpus.items())]
    total = sum(use.experiments for use in throughput.gpus.values())
    rate = "no rate yet (under a minute)" if early else f"{total / hours:.0f} experiments/hour overall"
    return rate + f"; {', '.join(parts)}"


def printable_line(text: object) -> str:
    """text as one line of printable characters, whitespace collapsed. An agent writes descriptions and hypotheses,
    and they become commit messages, results.tsv cells and terminal lines: a null byte or a lone surrogate would make
    git's command line (and the file's UTF-8) raise out of the loop; escapes and bidi controls would rewrite the
    terminal or hide text in `git log`."""
    return " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """"1 experiment", "3 experiments" ("many" for an irregular plural)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def format_speedup(value: float | None) -> str:
    """A speedup as people read it: 2.90x, or 0.046x (CPU runs give tiny ones), never in exponent notation (the
    interpreter's ratios can be 1e-4: "<0.001x"); "-" for none."""
    if value is None:
        return "-"
    if value >= 0.1:
        return f"{value:.2f}x"
    return f"{value:.2g}x" if value >= 0.001 else "<0.001x"


def _cost(status: LoopStatus) -> str:
    cost = f"${status.cost_usd:.2f}" + ("" if status.cost_complete else " (+ calls to a model without a price)")
    return (f"{status.llm_tokens:,} tokens ({status.llm_cached_tokens:,} cached, {status.llm_reasoning_tokens:,} "
            f"reasoning), {cost}")


def _panel(status: LoopStatus, width: int | None = None) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", justify="right")
    table.add_column()
    left = status.time_left_s()
    # Text, not markup: a phase like "judging [shape sweep]" or a verdict's [message] is not a style tag.
    table.add_row("now", Text(f"{status.phase} ({format_duration(time.monotonic() - status.phase_started)})"))
    table.add_row("kernel", Text(status.kernel))
    if status.jobs != "-":
        table.add_row("in flight", Text(status.jobs))
    table.add_row("experiments", f"{status.experiments} in this run, {status.kernel_experiments} on this kernel")
    table.add_row("best", status.best_note or f"{format_speedup(status.best_speedup)} over the baseline, "
                                              f"{format_speedup(status.best_vs_pytorch)} vs PyTorch's best")
    table.add_row("last", Text(status.last_result))
    table.add_row("LLM", _cost(status))
    table.add_row("pace", Text(status.gpus))
    table.add_row("time left", "-" if left is None else
                  f"{format_duration(left)} (ends by {time.strftime('%H:%M', time.localtime(time.time() + left))})")
    return Panel(table, title="autokernel optimize", border_style="cyan", width=width)


class _EventHandler(logging.Handler):
    def __init__(self, view: ProgressView):
        super().__init__(logging.INFO)
        self.view = view

    def emit(self, record: logging.LogRecord) -> None:
        self.view.log(record.getMessage())


ECHO_ROOM = len("^C")       # the columns the live panel leaves free at its right


class ProgressView:
    """Use as a context manager around the loop; interactive defaults to "stdout is a terminal"."""

    def __init__(self, *, interactive: bool | None = None, console: Console | None = None):
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.console = console or Console()
        self._given_console = console is not None
        self._terminal = None
        self.status = LoopStatus()
        self._live: Live | None = None
        self._handler = _EventHandler(self)
        self._depth = 0

    def __enter__(self) -> ProgressView:
        self._depth += 1
        if self._depth > 1:
            return self
        if not self._given_console and _has_fileno(sys.stdout):
            # A copy of the terminal, which quiet_native_output() does not redirect.
            sys.stdout.flush()
            self._terminal = os.fdopen(os.dup(sys.stdout.fileno()), "w")
            self.console = Console(file=self._terminal)
        logger = logging.getLogger("autokernel")
        logger.addHandler(self._handler)
        logger.setLevel(logging.INFO)
        if self.interactive:
            # Rendered afresh on every refresh, so the time left counts down during a long bench run. Narrower than
            # the terminal by the "^C" a terminal echoes after the panel's last line on Ctrl-C: a full-width panel
            # let it wrap onto a line of its own, and every redraw then erased from one line too low, leaving the
            # panel's top border above the run's last lines (the panel twice).
            self._live = Live(console=self.console, refresh_per_second=1,
                              get_renderable=lambda: _panel(self.status, width=max(self.console.width - ECHO_ROOM, 20)))
            self._live.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._depth -= 1
        if self._depth:
            return
        logging.getLogger("autokernel").removeHandler(self._handler)
        if self._live is not None:
            with contextlib.suppress(OSError):
                self._live.stop()
            self._live = None
        if self._terminal is not None:
            with contextlib.suppress(OSError):
                self._terminal.close()
            self._terminal, self.console = None, Console()

    def update(self, status: LoopStatus) -> None:
        self.status = status
        self._refresh()

    def phase(self, text: str) -> None:
        if text != self.status.phase:
            self.status.phase, self.status.phase_started = text, time.monotonic()
        self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            with contextlib.suppress(OSError):
                self._live.refresh()

    def log(self, message: str) -> None:
        # A closed terminal (SIGHUP) must not turn the run's last words into a crash.
        with contextlib.suppress(OSError, ValueError):
            if self._live is not None:
                self._live.console.print(message, markup=False, highlight=False, emoji=False)
            else:
                self.console.print(f"[{time.strftime('%H:%M:%S')}] {message}", markup=False, highlight=False,
                                   emoji=False, soft_wrap=True)


def _has_fileno(stream) -> bool:
    try:
        stream.fileno()
        return True
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def quiet_native_output(log_path: str | Path):
    """Send this process's own stdout and stderr (Python's and C++'s) to log_path for the block."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if not (_has_fileno(sys.stdout) and _has_fileno(sys.stderr)):
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "a") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            # Python's own streams too: they need not write to descriptors 1 and 2 (pytest's do not).
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield
        finally:
            sink.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


# In the workspace: what torch and Inductor said during a run (the profiler's tables, autotuning, warnings).
TORCH_LOG = "torch.log"


class LazyLog:
    """A text file opened (for appending) on its first write, so a run whose torch says nothing leaves none."""

    def __init__(self, path: Path):
        self.path, self._file = path, None

    def write(self, text: str) -> int:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a")
        written = self._file.write(text)
        self._file.flush()
        return written

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@contextlib.contextmanager
def torch_chatter_to(log_path: str | Path):
    """Python's warnings and torch's logging go to log_path for the block (opened only if something is said).
    torch gives its registered loggers ("torch", "torch._inductor", ...) stream handlers of their own on stderr:
    each such handler writes to the file meanwhile. What the process prints itself still reaches the terminal."""
    sink = LazyLog(Path(log_path))
    swapped = []
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (name == "torch" or name.startswith("torch.")) and isinstance(logger, logging.Logger):
            for handler in logger.handlers:
                if type(handler) is logging.StreamHandler:
                    swapped.append((handler, handler.setStream(sink)))
    before = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        sink.write(warnings.formatwarning(message, category, filename, lineno, line))
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = before
        for handler, stream in swapped:
            handler.setStream(stream)
        sink.close()
