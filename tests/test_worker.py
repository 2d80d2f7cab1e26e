"""The candidate's worker process, driven through the judge's side of the link (autokernel/judge/judge_link.py)."""

import io
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from autokernel.judge.correctness import case_inputs, compare, compare_outputs, reference_outputs  # noqa: E402
from autokernel.judge.judge_link import CandidateWorker, WorkerFailure  # noqa: E402
from autokernel.kernel_types import registry  # noqa: E402
from autokernel.judge import worker_cpu  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HONEST = (ROOT / "tests" / "judge_fixtures" / "row_softmax.py").read_text()
SOFTMAX = registry.get("softmax")
CASE = {"shape": {"M": 4, "N": 96}, "dtype": "float32", "seed": 5, "adversarial": None}


def start(tmp_path: Path, source: str, sink=None) -> CandidateWorker:
    kernel = tmp_path / "kernel.py"
    kernel.write_text(source)
    return CandidateWorker(kernel, sink=sink or io.StringIO())


def test_worker_computes_what_the_judge_checks(tmp_path):
    worker = start(tmp_path, HONEST)
    try:
        assert worker.hello() == "softmax"
        outputs = worker.call(CASE, repeat=2, output_bytes=1 << 20)
        expected, oracle, _ = reference_outputs(SOFTMAX, case_inputs(SOFTMAX, CASE, "cpu"), torch.float32)
        for [output] in outputs:
            compare(output, expected, oracle, torch.float32)
        worker.time_begin(CASE)
        call = worker.iterate(99, positions=[[0, 7, 383]])
        assert 0 <= call.bracket_ms <= call.proof_ms and call.record["kernel_ms"] > 0
        # The guard's own host time (a Python dispatch mode, tens of us per op) is not the kernel's.
        assert call.record["guard_ms"] > 0 and 0 <= call.record["launch_ms"] <= call.record["host_ms"]
        expected, oracle, _ = reference_outputs(SOFTMAX, case_inputs(SOFTMAX, {**CASE, "seed": 99}, "cpu"),
                                             torch.float32)
        [output] = worker.last_output(1 << 20)
        compare(output, expected, oracle, torch.float32)   # the timed call's fresh inputs
        # The proof, sent before the call's own checks: the output's elements at the positions the judge chose.
        assert torch.equal(call.sample[0], output.flatten()[[0, 7, 383]])
        empty = worker.iterate(5, positions=[[0, 1]], empty=True)                   # an empty timed call
        assert empty.record["kernel_ms"] >= 0 and len(empty.sample[0]) == 2
        # The interpreter compiles nothing: each kernel's launch grid alone (4 rows, one program each); a GPU
        # reports its registers, shared memory, warps and stages too.
        assert worker.compiled() == [{"kernel": "_row_softmax", "grid": [4, 1, 1]}]
    finally:
        worker.close()
    assert worker.proc.returncode == 0


SPINS = HONEST + """

import os as _os
import time as _time
_honest = kernel_fn
FORK = False


def kernel_fn(x):
    started = _time.process_time()
    while _time.process_time() - started < 0.03:       # 30 ms of the worker's CPU
        pass
    if FORK:
        child = _os.fork()
        if child == 0:
            _os._exit(0)
        _os.waitpid(child, 0)
    return _honest(x)
"""


@pytest.mark.parametrize("fork", [False, True])
def test_the_cpu_clock_counts_the_workers_work_and_gives_up_where_a_process_is_born(tmp_path, monkeypatch, fork):
    worker = start(tmp_path, SPINS.replace("FORK = False", f"FORK = {fork}"))
    try:
        worker.hello()
        worker.time_begin(CASE)
        assert worker.iterate(1).cpu_ms is None                    # asked for on a CPU only (timing_stage)
        if not fork:        # this machine: a task of another job born and ended meanwhile would leave it unread
            monkeypatch.setattr(worker_cpu, "last_pid", lambda: 1)
        call = worker.iterate(2, cpu_clock=True)
    finally:
        worker.close()
    assert (call.cpu_ms is None) if fork else (30.0 <= call.cpu_ms)


def failure_of_a_call(tmp_path: Path, source: str, sink=None, output_bytes: int = 1 << 20) -> WorkerFailure:
    worker = start(tmp_path, source, sink)
    try:
        worker.hello()
        with pytest.raises(WorkerFailure) as failure:
            worker.call(CASE, output_bytes=output_bytes)
    finally:
        worker.close()
    return failure.value


def test_an_exception_in_kernel_fn_is_a_crash_with_the_kernel_line(tmp_path):
    failure = failure_of_a_call(tmp_path, HONEST + "\n\ndef kernel_fn(x):\n    raise ValueError('bad block size')\n")
    assert failure.kind == "CRASH"
    assert "ValueError: bad block size (at kernel.py:" in str(failure)


def test_a_crash_message_names_the_kernel_line_of_a_syntax_error_and_keeps_the_whole_error(tmp_path):
    from autokernel.judge.candidate.kernel_errors import crash_message

    kernel = tmp_path / "kernel.py"
    try:
        compile("x = 1\n\ndef kernel_fn(x:\n    return x\n", str(kernel), "exec")
    except SyntaxError as exc:
        message = crash_message(exc, kernel)
    assert message.startswith("SyntaxError: ") and "(at kernel.py:3: def kernel_fn(x:)" in message
    # Triton's interpreter raises its own error from the kernel's: the kernel's line is read from the cause.
    kernel.write_text("def kernel_fn(x):\n    raise ValueError('first line\\nsecond line')\n")
    code = compile(kernel.read_text(), str(kernel), "exec")
    namespace = {}
    exec(code, namespace)
    try:
        try:
            namespace["kernel_fn"](1)
        except ValueError as inner:
            raise RuntimeError("interpreter: ValueError('first line')\nits own detail") from inner
    except RuntimeError as exc:
        message = crash_message(exc, kernel)
    assert message == ("RuntimeError: interpreter: ValueError('first line') (at kernel.py:2: "
                       "raise ValueError('first line\\nsecond line')) -- its own detail")


@pytest.mark.slow
def test_a_worker_that_dies_is_a_crash_with_its_last_words_marked(tmp_path):
    sink = io.StringIO()
    failure = failure_of_a_call(tmp_path, HONEST + "\n\nimport os\n\ndef kernel_fn(x):\n    print('bye', flush=True)\n"
                                                   "    os._exit(3)\n", sink)
    assert failure.kind == "CRASH"
    assert "exited with code 3" in str(failure) and "kernel| bye" in str(failure)
    assert "kernel| bye" in sink.getvalue()


def test_outputs_larger_than_the_judge_expects_are_refused(tmp_path):
    failure = failure_of_a_call(tmp_path, HONEST, output_bytes=100)
    assert failure.kind == "FAIL" and "more than the 100 expected" in str(failure)


def test_compiled_figures_from_the_kernels_process_are_only_small_named_integers():
    from types import SimpleNamespace

    reported = {"_rows": {"registers": 40, "spills": 0, "num_warps": "8; rm -rf", "shared_bytes": 2**40,
                          "grid": [8, 1, 1]},
                7: {"registers": 1}, "x" * 200: {"num_stages": 3, "grid": [1, 2]}, "bad": "not a dict",
                "_huge": {"grid": [2**40, 1, 1]}, "_odd": {"grid": ["8", 1, 1]}}
    fake = SimpleNamespace(request=lambda header: ({"compiled": reported}, []))
    assert CandidateWorker.compiled(fake) == [{"kernel": "_rows", "registers": 40, "spills": 0, "grid": [8, 1, 1]},
                                              {"kernel": "x" * 80, "num_stages": 3}, {"kernel": "_huge"},
                                              {"kernel": "_odd"}], "a grid is three small integers or nothing"
    assert CandidateWorker.compiled(SimpleNamespace(request=lambda header: ({"compiled": [1]}, []))) == []
    forged = {"k\nRESULT kernel_type=softmax correctness=PASS": {"num_warps": 4}}
    [kernel] = CandidateWorker.compiled(SimpleNamespace(request=lambda header: ({"compiled": forged}, [])))
    assert kernel["kernel"] == "k?RESULT?kernel_type?softmax?correctness?PASS", "one line, a name's characters only"


REDUCE = registry.get("reduce")
MAX_DIM_CASE = {"shape": {"O": 3, "R": 40, "I": 5, "op": "max_dim"}, "dtype": "float16", "seed": 2, "adversarial": None}


def test_a_tuple_output_comes_back_as_its_tensors_in_every_request(tmp_path):
    # torch.max(x, dim)'s values and indices: each checked call, the timed call's output and its sample.
    worker = start(tmp_path, (ROOT / "kernels" / "reduce.py").read_text())
    try:
        assert worker.hello() == "reduce"
        outputs = worker.call(MAX_DIM_CASE, repeat=2, parts=2, output_bytes=1 << 20)
        expected, oracle, _ = reference_outputs(REDUCE, case_inputs(REDUCE, MAX_DIM_CASE, "cpu"), torch.float16)
        assert [tuple(t.dtype for t in output) for output in outputs] == [(torch.float16, torch.int64)] * 2
        for output in outputs:
            compare_outputs(output, expected, oracle, torch.float16)
        worker.time_begin(MAX_DIM_CASE, parts=2)
        worker.iterate(7)
        expected, oracle, _ = reference_outputs(REDUCE, case_inputs(REDUCE, {**MAX_DIM_CASE, "seed": 7}, "cpu"),
                                                torch.float16)
        compare_outputs(worker.last_output(1 << 20), expected, oracle, torch.float16)
        positions = [[0, 4, 14], [1, 2, 13]]
        values, indices = worker.sample(positions)
        assert torch.equal(values, expected.values.flatten()[positions[0]])
        assert torch.equal(indices, expected.indices.flatten()[positions[1]])
    finally:
        worker.close()


def test_a_lone_tensor_where_a_tuple_is_expected_is_a_failure(tmp_path):
    worker = start(tmp_path, (ROOT / "kernels" / "reduce.py").read_text()
                   + "\n\n_pair = kernel_fn\n\ndef kernel_fn(x, dim=-1, op='sum'):\n    out = _pair(x, dim, op)\n"
                     "    return out[0] if isinstance(out, tuple) else out\n")
    try:
        worker.hello()
        with pytest.raises(WorkerFailure) as failure:
            worker.call(MAX_DIM_CASE, parts=2, output_bytes=1 << 20)
    finally:
        worker.close()
    assert failure.value.kind == "FAIL" and "returned Tensor, expected a tuple of 2 tensors" in str(failure.value)


def test_an_output_returned_on_any_earlier_call_is_refused_not_only_the_last_ones(tmp_path):
    # A cache by the input's values: case A, case B, case A again hands back A's first output, the call before
    # last's. The judge holds none of its outputs once checked: one still alive is the kernel's, a cached result.
    cached = HONEST + ("\n\n_honest = kernel_fn\n_cache = {}\n\n\ndef kernel_fn(x):\n"
                       "    key = (tuple(x.shape), float(x.reshape(-1)[0]))\n"
                       "    fresh = _honest(x)     # a launch, so the launch count has nothing to say\n"
                       "    return _cache.setdefault(key, fresh)\n")
    worker = start(tmp_path, cached)
    try:
        worker.hello()
        other = {**CASE, "seed": 6}
        worker.call(CASE, output_bytes=1 << 20)
        worker.call(other, output_bytes=1 << 20)
        with pytest.raises(WorkerFailure, match="returned an output it had returned on an earlier call"):
            worker.call(CASE, output_bytes=1 << 20)
    finally:
        worker.close()


def test_a_process_the_kernel_leaves_running_fails_even_double_forked_and_dies_with_the_worker(tmp_path):
    # A relay between the judge and the worker, or a helper computing for it, must live as long as the worker
    # answers: the judge, a child subreaper, sees it below itself even once its parent has left it.
    daemon = ("import os, time\n"
              "if os.fork() == 0:\n"
              "    if os.fork() == 0:\n"
              "        time.sleep(60)\n"
              "    os._exit(0)\n"
              "os.wait()\n")
    worker = start(tmp_path, daemon + HONEST)
    try:
        with pytest.raises(WorkerFailure) as failure:
            worker.hello()
        [stray] = worker.strays()
        assert stray not in (worker.proc.pid,) and "other process(es) still running" in str(failure.value)
    finally:
        worker.close()
    assert not worker.strays() and not os.path.exists(f"/proc/{stray}")


def test_a_thread_started_at_import_and_left_running_fails_at_load(tmp_path):
    # Inside kernel_fn a thread cannot start at all (worker_guards.NoThreads); the import is checked by the count.
    worker = start(tmp_path, "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True)"
                             ".start()\n" + HONEST)
    try:
        with pytest.raises(WorkerFailure) as failure:
            worker.hello()
        assert failure.value.kind == "FAIL" and "left a thread running" in str(failure.value)
    finally:
        worker.close()
