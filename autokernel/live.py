"""The optimization loop's progress view: a rich Live panel on a terminal, plain log lines anywhere else.

The loop reports two things: `update(status)` with a snapshot of where it is, and `log(message)`
for an event worth keeping (an experiment's verdict, a kernel saved). On a terminal the snapshot
is a panel redrawn in place with the events scrolling above it; in CI or a log file only the
events are printed, one timestamped line each, so the output stays greppable.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.table import Table


@dataclass
class LoopStatus:
    """A snapshot of the loop for the view."""
    kernel: str = "profiling"             # "rank 1 matmul (job 1 of 3)"
    experiments: int = 0                  # numbered experiments so far, resumed runs included
    kernel_experiments: int = 0           # experiments on the current kernel
    best_speedup: float | None = None     # current kernel: baseline latency / best latency
    best_vs_pytorch: float | None = None
    last_result: str = "-"
    deadline: float | None = None         # time.monotonic() at which the run's budget is spent
    # For the rate: experiments this process ran, since it started (a resumed run starts over).
    session_experiments: int = 0
    session_started: float = field(default_factory=time.monotonic)

    def experiments_per_hour(self) -> float | None:
        """None until the session has run a minute: a rate from the first seconds means nothing."""
        hours = (time.monotonic() - self.session_started) / 3600
        return self.session_experiments / hours if self.session_experiments and hours >= 1 / 60 else None

    def time_left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _panel(status: LoopStatus) -> Panel:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", justify="right")
    table.add_column()
    rate = status.experiments_per_hour()
    table.add_row("kernel", status.kernel)
    table.add_row("experiments", f"{status.experiments} in all, {status.kernel_experiments} on this kernel")
    table.add_row("best", f"{_speedup(status.best_speedup)} over the baseline, "
                          f"{_speedup(status.best_vs_pytorch)} vs PyTorch")
    table.add_row("last", status.last_result)
    table.add_row("rate", "-" if rate is None else f"{rate:.1f} experiments/hour")
    table.add_row("time left", format_duration(status.time_left_s()))
    return Panel(table, title="autokernel optimize", border_style="cyan")


class ProgressView:
    """Use as a context manager around the loop; interactive defaults to "stdout is a terminal"."""

    def __init__(self, *, interactive: bool | None = None, console: Console | None = None):
        self.interactive = sys.stdout.isatty() if interactive is None else interactive
        self.console = console or Console()
        self.status = LoopStatus()
        self._live: Live | None = None

    def __enter__(self) -> ProgressView:
        if self.interactive:
            # Rendered afresh on every refresh, so the time left counts down during a long bench run.
            self._live = Live(console=self.console, get_renderable=lambda: _panel(self.status), refresh_per_second=1)
            self._live.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, status: LoopStatus) -> None:
        self.status = status
        if self._live is not None:
            self._live.refresh()

    def log(self, message: str) -> None:
        if self._live is not None:
            self._live.console.print(message, markup=False, highlight=False)
        else:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)
