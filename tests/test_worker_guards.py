"""The checks that run in the candidate's process: no library compute, launch counting, poisoning, and what
counts as a fresh plain output (tamper and global-state detection: tests/test_worker_tampering.py)."""

import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autokernel.judge.candidate.worker_guards import (VIOLATIONS, LaunchCounter, LibraryCompute,  # noqa: E402
                                                       NoLibraryCompute, NoThreads, compiled_figures, guard_cost_ms,
                                                       output_problem, poisoned_allocations)


@pytest.fixture(autouse=True)
def _no_leftover_violations():
    VIOLATIONS.clear()
    yield
    VIOLATIONS.clear()


def test_allocation_views_copies_and_conversion_are_allowed():
    x = torch.randn(4, 6)
    with NoLibraryCompute("cpu"):
        y = torch.empty_like(x)
        y.copy_(x)
        z = x.reshape(24).view(4, 6).t().contiguous().to(torch.float16).float()
        w = torch.zeros(3)
        w.fill_(2.0)
        assert x[0, 0].item() == x[0, 0].item()
    assert torch.equal(y, x) and torch.equal(z.t(), x.half().float()) and w.sum().item() == 6.0
    assert VIOLATIONS.first() is None


@pytest.mark.parametrize("op, name", [(lambda x: torch.softmax(x, -1), "aten::_softmax"),
                                      (lambda x: x @ x.t(), "aten::mm"),
                                      (lambda x: x + 1, "aten::add"),
                                      (lambda x: x.sum(), "aten::sum")])
def test_compute_is_refused_and_named(op, name):
    x = torch.randn(4, 4)
    with pytest.raises(LibraryCompute, match=f"kernel_fn called {name}: the result must come from your own kernels"):
        with NoLibraryCompute("cpu"):
            op(x)


def test_a_caught_refusal_is_still_noted():
    with NoLibraryCompute("cpu"):
        try:
            torch.exp(torch.ones(2))
        except LibraryCompute:
            pass
    assert "aten::exp" in VIOLATIONS.first()


def test_on_a_gpu_host_bookkeeping_is_allowed_but_device_compute_is_not():
    # An autotuner takes the median of its timings with torch on CPU tensors; that is not the result.
    with NoLibraryCompute("cuda"):
        assert torch.quantile(torch.tensor([1.0, 2.0, 3.0]), 0.5).item() == 2.0
    assert VIOLATIONS.first() is None
    meta = torch.empty(4, device="meta")
    with pytest.raises(LibraryCompute):
        with NoLibraryCompute("cuda"):
            meta + 1


def test_ops_on_another_stream_are_refused():
    streams = iter(["side", "side"])
    with pytest.raises(LibraryCompute, match="on a side stream"):
        with NoLibraryCompute("cuda", stream_of=lambda: next(streams), timing_stream="timer"):
            torch.empty(3, device="meta")


def test_poisoned_allocations_are_nan_and_restored_afterwards():
    with poisoned_allocations():
        assert torch.isnan(torch.empty(8)).all()
        assert torch.isnan(torch.empty(8, dtype=torch.bfloat16)).all()
    assert not torch.are_deterministic_algorithms_enabled()


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def test_launch_counter_counts_triton_launches_only():
    counter = LaunchCounter().install()
    try:
        x = torch.randn(16)
        y = torch.empty_like(x)
        _copy[(1,)](x, y, 16, BLOCK=16)
        torch.softmax(x, dim=0)
        assert counter.count == 1
    finally:
        counter.uninstall()
    _copy[(1,)](x, y, 16, BLOCK=16)
    assert counter.count == 1


def test_launch_counter_notes_launches_on_another_stream():
    counter = LaunchCounter(stream_of=lambda: "side", timing_stream="timer").install()
    try:
        x = torch.randn(16)
        _copy[(1,)](x, torch.empty_like(x), 16, BLOCK=16)
    finally:
        counter.uninstall()
    assert "launched a Triton kernel on a side stream" in VIOLATIONS.first()


def test_plain_fresh_outputs_pass_and_others_are_named():
    x = torch.randn(4, 4)
    device = torch.device("cpu")
    assert output_problem(torch.empty(4, 4), {"x": x}, None, device) is None
    assert "returned list" in output_problem([x], {"x": x}, None, device)
    assert "subclass of torch.Tensor" in output_problem(x.clone().as_subclass(type("Lazy", (torch.Tensor,), {})),
                                                        {"x": x}, None, device)
    assert "shares memory with its input 'x'" in output_problem(x[1:], {"x": x}, None, device)
    previous = torch.empty(4, 4)
    assert "same output buffer" in output_problem(previous.view(16), {"x": x}, (previous,), device)
    assert "lazy tensor" in output_problem(torch.randn(4)._neg_view(), {"x": x}, None, device)
    assert "on meta" in output_problem(torch.empty(4, device="meta"), {"x": x}, None, device)


def test_a_tuple_output_is_held_to_the_same_rules_tensor_by_tensor():
    # torch.max(x, dim)'s values and indices: each a plain, fresh tensor of its own.
    x = torch.randn(4, 6)
    device = torch.device("cpu")
    values, indices = torch.empty(4), torch.empty(4, dtype=torch.int64)
    assert output_problem((values, indices), {"x": x}, None, device, parts=2) is None
    assert output_problem([values, indices], {"x": x}, None, device, parts=2) is None
    assert "returned Tensor, expected a tuple of 2 tensors" in output_problem(values, {"x": x}, None, device, parts=2)
    assert "returned tuple of 3" in output_problem((values, indices, values), {"x": x}, None, device, parts=2)
    assert "shares memory with its input 'x'" in output_problem((x[:, 0], indices), {"x": x}, None, device, parts=2)
    assert "same output buffer" in output_problem((torch.empty(4), indices), {"x": x}, (values, indices), device,
                                                  parts=2)
    both = torch.empty(8)
    assert "share memory with each other" in output_problem((both[:4], both[4:].view(torch.int32)), {"x": x}, None,
                                                            device, parts=2)
    assert "returned int" in output_problem((values, 3), {"x": x}, None, device, parts=2)


def test_the_guards_own_host_cost_is_measured_per_call_and_per_op():
    mode = NoLibraryCompute("cpu")
    per_call, per_op = guard_cost_ms(mode, torch.device("cpu"), time.perf_counter)
    # A Python dispatch mode costs microseconds per op on any machine; calibration ops are not counted.
    assert per_call >= 0 and per_op > 0.0005 and mode.ops == 0
    x = torch.zeros(4)
    with mode:
        torch.empty_like(x).copy_(x).view(-1)
    assert mode.ops == 3


def _compiled_kernel(registers):
    """What a GPU launch returns: Triton's CompiledKernel, with its compiler figures."""
    from types import SimpleNamespace

    return SimpleNamespace(n_regs=registers, n_spills=0,
                           metadata=SimpleNamespace(shared=16384, num_warps=4, num_stages=3, name="_rows"))


def test_the_launch_counter_keeps_each_kernels_latest_compiled_figures():
    from types import SimpleNamespace

    counter = LaunchCounter()
    kernels = iter([_compiled_kernel(40), _compiled_kernel(40), _compiled_kernel(96)])
    run = counter._counting(lambda fn_self, *args, **kwargs: next(kernels))
    for _ in range(3):
        run(SimpleNamespace(__name__="_rows"))
    assert counter.count == 3
    assert counter.compiled == {"_rows": {"registers": 96, "spills": 0, "shared_bytes": 16384, "num_warps": 4,
                                          "num_stages": 3}}
    # The interpreter's launches return nothing: no figures, and the launch still counts.
    assert compiled_figures(None) is None
    _copy_counter = LaunchCounter().install()
    try:
        _copy[(1,)](torch.randn(16), torch.empty(16), 16, BLOCK=16)
        assert _copy_counter.count == 1 and _copy_counter.compiled == {}
    finally:
        _copy_counter.uninstall()


def test_the_launch_counter_notes_each_kernels_latest_grid_tuple_or_callable():
    counter = LaunchCounter().install()
    try:
        x = torch.randn(40)
        _copy[(3,)](x, torch.empty_like(x), 40, BLOCK=16)
        assert counter.report() == {"_copy": {"grid": [3, 1, 1]}}
        _copy[lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),)](x, torch.empty_like(x), 40, BLOCK=8)
        assert counter.report() == {"_copy": {"grid": [5, 1, 1]}}, "a callable grid is noted as Triton resolved it"
    finally:
        counter.uninstall()


def test_a_thread_started_inside_kernel_fn_is_refused_and_noted_one_outside_is_not():
    # Dispatch modes are per thread: a thread of kernel_fn's own would run PyTorch where NoLibraryCompute is not.
    import _thread
    import threading

    original = _thread.start_new_thread
    guard = NoThreads().install()
    try:
        outside = threading.Thread(target=lambda: None)
        outside.start()
        outside.join()
        assert VIOLATIONS.first() is None
        with guard:
            with pytest.raises(LibraryCompute):
                threading.Thread(target=lambda: None).start()
            with pytest.raises(LibraryCompute):
                _thread.start_new_thread(lambda: None, ())
        assert "kernel_fn started a thread" in VIOLATIONS.first()
    finally:
        guard.uninstall()
    assert _thread.start_new_thread is original and threading._start_new_thread is original
