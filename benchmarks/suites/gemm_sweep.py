"""The GEMM engine against cuBLAS at every GEMM shape of the five models, and the measured plan table it leaves.

For each distinct GEMM of models/llama.py (4 x 1024 and 1 x 512), the Hugging Face GQA LLaMA (4 x 1024),
models/gpt2.py and models/bert.py (benchmarks/kernels.py model-gemms), in float16: every plan of the engine's
bounded space (ENGINE_PLANS of its kind, with split-K where the tiles leave SMs idle), then Triton's
warp specialization and other GROUP_M on the three best; in bfloat16 the three best float16 plans.
Every plan's output is checked against a float32 product by the judge's tolerance rule before it is
timed; a plan that fails to compile or to match is recorded and never chosen. Timing is
triton.testing.do_bench (L2 flushed before every call, median), ours and cuBLAS (F.linear, on the
same random inputs, in this process); the final ratio is the median of three alternating repeats of
the best plan and cuBLAS. Plans compile first in --workers processes (Triton's cache is shared),
so the timing loop only loads them.

    python benchmarks/kernels.py gemm-sweep --out OUT [--budget-s 330] [--workers 12]
    python benchmarks/kernels.py gemm-sweep --out OUT --dry-run        # CPU: the interpreter, the tiny models

Writes OUT/gemm_table.json (the plans, for `python -m autokernel.core.starter_blocks --table`, and every
measurement) after each shape, and OUT/gemm_table.md; prints progress and the table. No new shape
starts past --budget-s; what was measured is kept.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks.common import ROOT, run_info, timer_ms, write_text

TOP = 3                      # plans carried from the first pass to the second, and to bfloat16
REPEATS = 3                  # alternating repeats of the best plan and cuBLAS for the final ratio
SPLITS = (2, 4)              # split-K tried where a plan's tiles leave SMs idle
MIN_K_PER_SPLIT = 512


def _engine():
    from autokernel.core.kernel_file import import_file
    return import_file(ROOT / "kernels" / "_gemm_engine.py", "_sweep_gemm_engine")


def _inputs(gemm: dict, dtype, device, seed: int = 0):
    import torch
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((gemm["M"], gemm["K"]), generator=gen, device=device).to(dtype)
    weights = [(torch.randn((gemm["N"], gemm["K"]), generator=gen, device=device) / gemm["K"] ** 0.5).to(dtype)
               for _ in range(2 if gemm["kind"] == "dual" else 1)]
    return a, weights


def _run_ours(engine, gemm: dict, a, weights, plan):
    if gemm["kind"] == "dual":
        return engine.engine_gemm(a, weights[0].t(), b2=weights[1].t(), act="silu", plan=plan)
    return engine.engine_gemm(a, weights[0].t(), plan=plan)


def _compile_task(task: tuple) -> tuple:
    """In a worker process: run one (shape, dtype, plan) once, so Triton compiles it into the shared cache."""
    gemm, dtype_name, text, device = task
    import torch
    engine = _engine()
    try:
        a, weights = _inputs(gemm, getattr(torch, dtype_name), device)
        _run_ours(engine, gemm, a, weights, engine.parse_engine_plan(text))
        if device == "cuda":
            torch.cuda.synchronize()
        return task, None
    except Exception as exc:        # a plan that does not compile or fit is recorded, not fatal
        return task, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"


class Sweep:
    def __init__(self, args):
        import torch
        self.torch, self.args = torch, args
        self.engine = _engine()
        self.gpu = torch.cuda.is_available() and not args.dry_run
        self.device = "cuda" if self.gpu else "cpu"
        self.sms = (torch.cuda.get_device_properties(0).multi_processor_count if self.gpu
                    else self.engine.ENGINE_INTERPRETER_SMS)
        # Under --dry-run the pool runs too (the interpreter "compiles" nothing), so its path is tested on the CPU.
        self.pool = ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn")) \
            if args.workers > 1 else None
        self.started = time.monotonic()
        self.rows: list[dict] = []
        self.plans: dict[str, list] = {}

    # ------------------------------------------------------------------ timing and checking
    def time_ms(self, fn) -> float:
        return timer_ms(self.gpu, warmup=5, rep=self.args.rep_ms, cpu_calls=2)(fn)

    def check(self, out, expected, oracle, dtype) -> str | None:
        from autokernel.judge.correctness import tolerance_used
        used = tolerance_used(out, expected, oracle, dtype)
        return None if used <= 1.0 else f"wrong: {used:.2f}x the judge's tolerance"

    def candidates(self, gemm: dict) -> list[str]:
        """The first pass: every plan of the kind, split where its tiles leave more than a third of the SMs idle."""
        out = []
        for text in self.engine.ENGINE_PLANS[gemm["kind"]][:2 if self.args.dry_run else None]:
            p = self.engine.parse_engine_plan(text)
            tiles = -(-gemm["M"] // p.block_m) * -(-gemm["N"] // p.block_n)
            out.append(f"{text}/g8/k1/ws0")
            for split in SPLITS:
                if tiles * 3 < 2 * self.sms and gemm["K"] // split >= MIN_K_PER_SPLIT:
                    out.append(f"{text}/g8/k{split}/ws0")
        return out

    def second_pass(self, best: list[str]) -> list[str]:
        """Warp specialization on the best plans, and other tile orders (GROUP_M) on the best one."""
        if self.args.dry_run:
            return []
        out = [text.replace("/ws0", "/ws1") for text in best]
        out += [best[0].replace("/g8/", f"/g{g}/") for g in (4, 16)]
        return out

    def precompile(self, tasks: list[tuple]) -> dict:
        if self.pool is None:
            return {}
        return {task[2]: error for task, error in self.pool.map(_compile_task, tasks) if error}

    # ------------------------------------------------------------------ one shape
    def measure(self, gemm: dict, dtype_name: str, plans: list[str]) -> dict:
        torch = self.torch
        dtype = getattr(torch, dtype_name)
        a, weights = _inputs(gemm, dtype, self.device, seed=hash((gemm["M"], gemm["N"], gemm["K"])) % 2**31)
        cat = torch.cat(weights) if len(weights) > 1 else weights[0]       # cuBLAS: the same FLOPs in one GEMM
        oracle = a.float() @ weights[0].float().T
        if gemm["kind"] == "dual":
            oracle = torch.nn.functional.silu(oracle) * (a.float() @ weights[1].float().T)
            g, u = torch.nn.functional.linear(a, weights[0]), torch.nn.functional.linear(a, weights[1])
            expected = (torch.nn.functional.silu(g.float()) * u.float()).to(dtype)
        else:
            expected = torch.nn.functional.linear(a, weights[0])
        failures = self.precompile([(gemm, dtype_name, text, self.device) for text in plans])
        timings = {}
        for text in plans:
            if text in failures:
                continue
            try:
                plan = self.engine.parse_engine_plan(text)
                failures[text] = self.check(_run_ours(self.engine, gemm, a, weights, plan), expected, oracle, dtype)
                if failures[text] is None:
                    del failures[text]
                    timings[text] = self.time_ms(lambda: _run_ours(self.engine, gemm, a, weights, plan))
            except Exception as exc:        # out of resources at launch, a compile error without the pool
                failures[text] = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        ranked = sorted(timings, key=timings.get)
        result = {"dtype": dtype_name, "timings_us": {t: round(v * 1e3, 2) for t, v in timings.items()},
                  "failures": failures, "ranked": ranked}
        if ranked:
            best = self.engine.parse_engine_plan(ranked[0])
            ours, theirs = [], []
            for _ in range(REPEATS):
                ours.append(self.time_ms(lambda: _run_ours(self.engine, gemm, a, weights, best)))
                theirs.append(self.time_ms(lambda: torch.nn.functional.linear(a, cat)))
            result.update(plan=ranked[0], ours_us=statistics.median(ours) * 1e3,
                          cublas_us=statistics.median(theirs) * 1e3,
                          ratio=statistics.median(t / o for t, o in zip(theirs, ours)))
        return result

    def sweep(self, gemm: dict) -> None:
        first = self.measure(gemm, "float16", self.candidates(gemm))
        best = first["ranked"][:TOP]
        if best:
            more = self.measure(gemm, "float16", [t for t in self.second_pass(best) if t not in first["timings_us"]])
            first = self._merge(gemm, first, more)
        rows = [first]
        if first["ranked"] and not self.out_of_time():
            rows.append(self.measure(gemm, "bfloat16", first["ranked"][:TOP]))
        for row in rows:
            row.update({k: gemm[k] for k in ("M", "N", "K", "kind", "uses")})
            self.rows.append(row)
            if row.get("plan"):
                self.plans.setdefault(f"{row['dtype']}/{gemm['kind']}/{gemm['N']}/{gemm['K']}", []).append(
                    [gemm["M"], row["plan"]])

    def _merge(self, gemm: dict, first: dict, more: dict) -> dict:
        timings = {**first["timings_us"], **more["timings_us"]}
        ranked = sorted(timings, key=timings.get)
        merged = {**first, "timings_us": timings, "failures": {**first["failures"], **more["failures"]},
                  "ranked": ranked}
        winner = more if more.get("plan") == ranked[0] else first
        return {**merged, **{k: winner[k] for k in ("plan", "ours_us", "cublas_us", "ratio") if k in winner}}

    def out_of_time(self) -> bool:
        return time.monotonic() - self.started > self.args.budget_s

    # ------------------------------------------------------------------ output
    def write(self, out: Path) -> None:
        table = {**run_info(on_gpu=self.gpu).as_dict(), "plans": self.plans, "rows": self.rows}
        tmp = out / "gemm_table.json.tmp"
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, out / "gemm_table.json")      # a reader never sees half a table
        write_text(out / "gemm_table.md", markdown(table))


def markdown(table: dict) -> str:
    lines = [f"GEMM engine against cuBLAS: {table['device']}, torch {table['torch']}, Triton {table['triton']}, "
             f"{table['date']}. do_bench medians, L2 flushed; ratio = cuBLAS / ours, median of {REPEATS} "
             "alternating repeats (above 1: ours faster). A dual row is the gate and up GEMMs with silu(g) * u in "
             "the epilogue, against one cuBLAS GEMM over the concatenated weights (the same FLOPs).", "",
             "| M x N x K | kind | dtype | cuBLAS us | ours us | ratio | plan | plans timed | failed | used by |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in table["rows"]:
        uses = "; ".join(sorted({u.split(':')[0] for u in row["uses"]}))
        timed = f"{row['ours_us']:.1f} | {row['ratio']:.3f}" if row.get("plan") else "- | -"
        lines.append(f"| {row['M']} x {row['N']} x {row['K']} | {row['kind']} | {row['dtype']} | "
                     f"{row.get('cublas_us', 0):.1f} | {timed} | {row.get('plan', '-')} | {len(row['timings_us'])} | "
                     f"{len(row['failures'])} | {uses} |")
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=330.0, help="start no new shape after this many seconds")
    parser.add_argument("--workers", type=int, default=12, help="processes compiling plans before they are timed")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="do_bench's timing window per plan")
    parser.add_argument("--dry-run", action="store_true", help="CPU: the interpreter at the tiny models' shapes")
    parser.add_argument("--limit", type=int, default=None, help="only the first N shapes")


def main(args: argparse.Namespace) -> int:
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"
    from benchmarks.suites.model_gemms import model_gemms
    args.out.mkdir(parents=True, exist_ok=True)
    gemms = [{"M": g.M, "N": g.N, "K": g.K, "kind": g.kind, "uses": g.uses} for g in model_gemms(tiny=args.dry_run)]
    sweep = Sweep(args)
    for index, gemm in enumerate(gemms[:args.limit]):
        if sweep.out_of_time():
            print(f"past --budget-s {args.budget_s:g}: {len(gemms) - index} shapes not measured", flush=True)
            break
        began = time.monotonic()
        sweep.sweep(gemm)
        sweep.write(args.out)
        for row in sweep.rows[-2:]:
            if (row["M"], row["N"], row["K"], row["kind"]) == (gemm["M"], gemm["N"], gemm["K"], gemm["kind"]):
                print(f"[{time.monotonic() - sweep.started:5.0f} s] {gemm['M']}x{gemm['N']}x{gemm['K']} {gemm['kind']} "
                      f"{row['dtype']}: {row.get('plan', 'no plan passed')} {row.get('ratio', 0):.3f}x cuBLAS "
                      f"({len(row['timings_us'])} timed, {len(row['failures'])} failed, "
                      f"{time.monotonic() - began:.0f} s)", flush=True)
    if sweep.pool is not None:
        sweep.pool.shutdown()
    print(markdown(json.loads((args.out / "gemm_table.json").read_text())))
    return 0

