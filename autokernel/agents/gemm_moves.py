"""Structural moves for a GEMM kernel, proposed from a cost model before the built-in search measures them.

Coordinate descent turns one knob a neighbour at a time; a GEMM's big levers are structural: the output tile
(how many tiles, so how full the last wave of SMs is) and split-K (more work units when the tiles leave SMs
idle, at the price of float32 partials written and summed). For a kernel that declares `engine_plan`
("BMxBNxBK/wW/sS" strings) and `engine_split_k` tunables, this module plans every (plan, split) pair of
their TUNABLE_CHOICES with the repository's starter (axis_order.starter_plans: the tiles and split each
shape really gets, "table" values resolved), predicts each one's time with a small model, and returns the
few predicted no slower than the current configuration (a tie only where nothing is predicted faster), best
first, each with a line people read in results.tsv ("split-K 8 at 64x2048x2048 (60 FLOP/B, memory-bound): 0.12
waves -> 0.97 (wave efficiency 12% -> 97%); ...; predicted 21.9 -> 5.25 us"). The model ranks; the judge decides:
a wrong prediction costs one experiment. Stream-K, epilogue placement and operand repacks are not moves here:
the engine has no tunable for them.

The model, per shape (M, N, K, batch):
- units = tiles (ceil(M/BM) * ceil(N/BN) * batch) * split; waves = units / SMs; wave efficiency = units /
  (ceil(waves) * SMs): the share of SM time the waves keep busy (an idle SM neither computes nor loads).
- time = max(FLOPs / (peak * tile reuse), operand bytes / bandwidth) / wave efficiency + partial bytes /
  bandwidth. Tile reuse: a tile smaller than 128 x 128 re-reads its operands (from L2) more often per FLOP,
  sqrt-damped (the pipeline hides part of it) and never a bonus above 1. Partials: 2 * split * M * N float32
  (written, then read by the sum), nothing without a split.
- Split-K is not proposed where a slice would keep under MIN_K_PER_SPLIT of K, or where the tiles alone
  already fill FULL_WAVES_NO_SPLIT waves: there the partials cost more than the last wave gains.
The SM count, 16-bit tensor peak and bandwidth are the judge's GPU's (its device name in the baseline), else
the platform's, else an H100 SXM's (132 SMs), and the line says it was assumed. (The starter plans "table"
values on the CPU as for an H100's 132 SMs, whatever the GPU.)
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

from autokernel.agents import axis_order
from autokernel.core import hardware
from autokernel.core.dtypes import DTYPES

log = logging.getLogger(__name__)

PLAN, SPLIT = "engine_plan", "engine_split_k"   # the tunables that make a kernel a GEMM with structural moves
MAX_MOVES = 4
MIN_K_PER_SPLIT = 256           # a K slice shorter than this costs more in partials and launch than it gains
FULL_WAVES_NO_SPLIT = 2         # tiles that fill this many waves already keep every SM busy
REFERENCE_REUSE = 2 * 128 * 128 / (128 + 128)   # FLOPs per operand element loaded by a 128 x 128 tile
ASSUMED_GPU = "H100 SXM"        # what the model plans for when the GPU is not known


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    batch: int = 1

    @classmethod
    def of(cls, shape: dict) -> Shape:
        return cls(shape["M"], shape["N"], shape["K"], shape.get("batch", shape.get("B", 1)))

    def text(self) -> str:
        return f"{self.batch}x" * (self.batch != 1) + f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch


@dataclass(frozen=True)
class Setting:
    """What one configuration runs at one shape: the output tile and the K split."""
    block_m: int
    block_n: int
    split: int


@dataclass(frozen=True)
class Machine:
    sms: int
    tflops: float
    gbs: float
    assumed: bool = False       # no GPU known: an H100 SXM's figures


@dataclass(frozen=True)
class Fill:
    units: int                  # output tiles x K slices: the programs' work units
    waves: float
    efficiency: float


def fill(shape: Shape, setting: Setting, sms: int) -> Fill:
    units = -(-shape.m // setting.block_m) * -(-shape.n // setting.block_n) * shape.batch * setting.split
    waves = units / sms
    return Fill(units, waves, units / (max(1, math.ceil(waves)) * sms))


def bytes_moved(shape: Shape, itemsize: int) -> int:
    """A and B read once, C written once: the least any GEMM moves."""
    return (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * shape.batch * itemsize


def intensity(shape: Shape, itemsize: int) -> float:
    """FLOPs per byte moved: above the GPU's ridge point the product is compute-bound."""
    return shape.flops / bytes_moved(shape, itemsize)


def partial_bytes(shape: Shape, split: int) -> int:
    return 2 * split * shape.m * shape.n * shape.batch * 4 if split > 1 else 0


def _reuse(setting: Setting) -> float:
    """FLOPs per operand element a tile loads: 2 * BM * BN * BK FLOPs for (BM + BN) * BK elements."""
    return 2 * setting.block_m * setting.block_n / (setting.block_m + setting.block_n)


def tile_reuse(setting: Setting) -> float:
    """The share of the tensor cores' rate a tile keeps for its operand loads: 1 from 128 x 128 up."""
    return min(1.0, math.sqrt(_reuse(setting) / REFERENCE_REUSE))


def predicted_us(shape: Shape, setting: Setting, machine: Machine, itemsize: int) -> float:
    compute_us = shape.flops / (machine.tflops * 1e6 * tile_reuse(setting))
    memory_us = bytes_moved(shape, itemsize) / (machine.gbs * 1e3)
    return (max(compute_us, memory_us) / fill(shape, setting, machine.sms).efficiency
            + partial_bytes(shape, setting.split) / (machine.gbs * 1e3))


def split_allowed(shape: Shape, setting: Setting, sms: int) -> bool:
    if setting.split <= 1:
        return True
    tiles = fill(shape, Setting(setting.block_m, setting.block_n, 1), sms).units
    return shape.k / setting.split >= MIN_K_PER_SPLIT and tiles < FULL_WAVES_NO_SPLIT * sms


def machine_of(platform: hardware.Platform | None, device_names: list[str | None]) -> Machine:
    """The GPU the job is judged on: the first of the results' device names the GPU table knows, else the
    platform's GPU, else an H100 SXM's figures (assumed: the line says so)."""
    specs = [hardware.lookup(name) for name in device_names if name]
    specs += [platform.gpu] if platform is not None and platform.gpu.is_gpu else []
    for spec in specs:
        if spec is not None and spec.sm_count and spec.fp16_tflops and spec.mem_bandwidth_gbs:
            return Machine(spec.sm_count, spec.fp16_tflops, spec.mem_bandwidth_gbs)
    spec = hardware.lookup(ASSUMED_GPU)
    return Machine(spec.sm_count, spec.fp16_tflops, spec.mem_bandwidth_gbs, assumed=True)


@dataclass(frozen=True)
class Move:
    config: dict                # the whole TUNABLES the move proposes
    settings: tuple[Setting, ...]   # what it runs at each shape
    predicted_us: float
    description: str


def rank_moves(shapes: list[Shape], current: list[Setting], candidates: list[tuple[dict, list[Setting]]],
               machine: Machine, itemsize: int, limit: int = MAX_MOVES) -> list[Move]:
    """The candidates predicted no slower than the current configuration, best first (then the larger tile,
    the smaller split, the choices' order); one per distinct set of settings, none that runs as now."""
    def total(settings) -> float:
        return sum(predicted_us(shape, s, machine, itemsize) for shape, s in zip(shapes, settings))

    heavy = max(range(len(shapes)), key=lambda i: shapes[i].flops)     # the shape the line describes
    now, seen, ranked = total(current), {tuple(current)}, []
    for order, (config, settings) in enumerate(candidates):
        changed = [(shape, s) for shape, s, c in zip(shapes, settings, current) if s.split != c.split]
        if tuple(settings) in seen or not all(split_allowed(shape, s, machine.sms) for shape, s in changed):
            continue
        seen.add(tuple(settings))
        time = total(settings)
        if time <= now * (1 + 1e-9):
            tile = settings[heavy].block_m * settings[heavy].block_n
            ranked.append(((time, -tile, settings[heavy].split, order), config, settings, time))
    ranked.sort(key=lambda entry: entry[0])
    if ranked and ranked[0][3] < now * (1 - 1e-9):        # ties are only worth a try where nothing is better
        ranked = [entry for entry in ranked if entry[3] < now * (1 - 1e-9)]
    return [Move(config, tuple(settings), time,
                 describe(shapes, current, list(settings), config, machine, itemsize, now, time))
            for _, config, settings, time in ranked[:limit]]


def describe(shapes: list[Shape], current: list[Setting], settings: list[Setting], config: dict, machine: Machine,
             itemsize: int, before_us: float, after_us: float) -> str:
    """One line: what changes, at the heaviest shape it changes its waves and wave efficiency before and after,
    the partials a split writes, the predicted time (over every shape)."""
    changed = [i for i in range(len(shapes)) if settings[i] != current[i]] or list(range(len(shapes)))
    heavy = max(changed, key=lambda i: shapes[i].flops)
    shape, was, now = shapes[heavy], current[heavy], settings[heavy]
    parts, extra = [], []
    if (now.block_m, now.block_n) != (was.block_m, was.block_n):
        plan = str(config.get(PLAN))       # the plan's own tile: the CPU's planning shrinks it to a small output
        named = re.match(r"(\d+)x(\d+)x", plan)
        parts.append(f"tile {named[1]}x{named[2]} ({plan})" if named else f"tile {now.block_m}x{now.block_n}")
        extra.append(f"tile reuse {_reuse(was):.0f} -> {_reuse(now):.0f} FLOP per operand element")
    if now.split != was.split:
        parts.append(f"split-K {now.split}" if now.split > 1 else "no split-K")
    a, b = fill(shape, was, machine.sms), fill(shape, now, machine.sms)
    ridge = machine.tflops * 1e3 / machine.gbs
    flop_per_byte = intensity(shape, itemsize)
    text = (f"{' + '.join(parts) or 'plan ' + str(config.get(PLAN))} at {shape.text()} ({flop_per_byte:.0f} FLOP/B, "
            f"{'compute' if flop_per_byte >= ridge else 'memory'}-bound): {_waves(a.waves)} waves -> "
            f"{_waves(b.waves)} (wave efficiency {a.efficiency:.0%} -> {b.efficiency:.0%})")
    if now.split != was.split:
        extra.append(f"partials {partial_bytes(shape, was.split) / 1e6:.3g} -> "
                     f"{partial_bytes(shape, now.split) / 1e6:.3g} MB")
    over = f" over {len(shapes)} shapes" if len(shapes) > 1 else ""
    extra.append(f"predicted {before_us:.3g} -> {after_us:.3g} us{over}")
    if machine.assumed:
        extra.append(f"GPU unknown: {machine.sms} SMs assumed")
    return f"{text}; {'; '.join(extra)}"


def _waves(waves: float) -> str:
    return f"{waves:.2g}" if waves < 10 else f"{waves:.0f}"


def propose(kernel_type: str, tunables: dict, choices: dict[str, list], shapes: list[dict], dtype_name: str | None,
            machine: Machine, limit: int = MAX_MOVES) -> list[dict]:
    """The structural moves for a job, as {"description", "config"}: none for a kernel without both tunables,
    a job without GEMM shapes, or a starter that cannot plan them."""
    if PLAN not in choices or SPLIT not in choices or not shapes or not all({"M", "N", "K"} <= set(s) for s in shapes):
        return []
    configs = [{**tunables, PLAN: plan, SPLIT: split} for plan in choices[PLAN] for split in choices[SPLIT]]
    configs = [config for config in configs if config != tunables]
    plans = axis_order.starter_plans(kernel_type, [tunables, *configs], shapes, dtype_name, "no structural GEMM moves")
    if plans is None:
        return []
    try:
        settings = [[Setting(p.block_m, p.block_n, p.split_k) for p in made] for made in plans]
    except AttributeError as err:       # a plan without tiles and a split: nothing to model
        log.warning("no structural GEMM moves for %s: %s", kernel_type, err)
        return []
    itemsize = DTYPES.get(dtype_name or "float16", DTYPES["float16"]).itemsize
    moves = rank_moves([Shape.of(s) for s in shapes], settings[0], list(zip(configs, settings[1:])), machine,
                       itemsize, limit)
    return [{"description": move.description, "config": move.config} for move in moves]
