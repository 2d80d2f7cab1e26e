"""The run's pace, a part of its state (run_records.RunState.throughput, saved in workspace/state.json).

Throughput keeps, across resumes, the loop's wall time with the workers up and each GPU's use
(GpuUse, by its label); with several GPUs, also when each job was in flight and where its benches
ran (JobSpan, by job name), which the live view, the report and the benchmarks read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class GpuUse:
    """What one judge worker (one GPU) did in a run: experiments judged, and seconds spent judging."""
    experiments: int = 0
    busy_s: float = 0.0


@dataclass
class JobSpan:
    """With several GPUs, when a job was in flight, on the loop's clock (Throughput.wall_s at its start and
    end; no end while it is open), and how many benches of it (baseline runs included) each GPU judged."""
    started_s: float
    ended_s: float | None = None
    benches: dict[str, int] = field(default_factory=dict)


@dataclass
class Throughput:
    """The run's pace, kept across resumes: wall time with the workers up, and each GPU's use (by its label).
    A GPU's idle time is the wall time less its busy time (waiting for the loop, or for other candidates).
    jobs: each job's JobSpan, by name (several GPUs only: there jobs run side by side)."""
    wall_s: float = 0.0
    gpus: dict[str, GpuUse] = field(default_factory=dict)
    jobs: dict[str, JobSpan] = field(default_factory=dict)

    def gpu(self, label: str) -> GpuUse:
        return self.gpus.setdefault(label, GpuUse())

    def experiments_per_hour(self, label: str | None = None) -> float | None:
        """One GPU's rate (label), or the whole run's; None before a minute has passed."""
        if self.wall_s < 60:
            return None
        count = (self.gpus[label].experiments if label in self.gpus else 0) if label else \
            sum(use.experiments for use in self.gpus.values())
        return count * 3600 / self.wall_s

    def idle_s(self, label: str) -> float:
        return max(0.0, self.wall_s - self.gpus[label].busy_s) if label in self.gpus else self.wall_s

    to_json = asdict

    @classmethod
    def from_json(cls, data: dict) -> Throughput:
        return cls(wall_s=data.get("wall_s", 0.0),
                   gpus={label: GpuUse(**use) for label, use in (data.get("gpus") or {}).items()},
                   jobs={name: JobSpan(**span) for name, span in (data.get("jobs") or {}).items()})
