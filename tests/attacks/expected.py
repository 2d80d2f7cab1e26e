"""What the judge must answer for each attack kernel in this folder (loaded with runpy).

ATTACKS are judged by bench.py itself; RUNNER_ATTACKS, below, through the runner's sandbox.

name -> (correctness, failed stage or stages, a piece of the message (or a tuple of them, one per way the
attack can be caught), where it runs). "cpu" attacks run in
CI through the Triton interpreter and on the GPU; "gpu" attacks need CUDA streams and events and
run in benchmarks/judge.py attacks. Every attack got a PASS (or got past the checks it targets)
from the judge before issue 12; tests/test_attacks.py says which. The reduce attacks on
torch.max(x, dim)'s indices (issue 11) got past a judge that compared one tensor per output.

BENCH_ARGS: the bench.py arguments an attack is judged with beyond the seed and --quick: a job
shape, where the attack cheats only in the timed calls of an op other than the timing shape's.
"""

ATTACKS = {
    "forge_result_at_import": ("CRASH", "load", "without answering the judge", "cpu"),
    "rewrite_checker_at_import": ("FAIL", "load", "replaced autokernel.judge.correctness.compare", "cpu"),
    "replace_timer_at_import": ("FAIL", "load", "replaced time.perf_counter", "cpu"),
    "decoy_launch_returns_torch": ("FAIL", "smoke", "kernel_fn called aten::_softmax: the result must come from "
                                                    "your own kernels", "cpu"),
    "stale_output_when_called_often": ("FAIL", "timing", "changes behaviour with the call count", "cpu"),
    # Wherever the allocator first hands the same address to new inputs: in timing at the latest.
    "stale_on_every_other_call": ("FAIL", "timing", "changes behaviour with the call count", "cpu"),
    # Any stage after the first call can catch it (determinism too, seen in CI): at timing at the latest.
    "cache_by_data_pointer": ("FAIL", ("smoke", "shape sweep", "stability", "determinism", "edge shapes", "timing"),
                              ("wrong", "at another address"), "cpu"),
    # Round 3: keyed on the address and the version counter, the cached tensor itself handed back. The timed calls'
    # fresh values are written where the version counter does not see them: the hits come at once, if the allocator
    # did not give a checked case's input an old one's address before (then: nothing launched, or an earlier output).
    "cache_by_address_and_version": ("FAIL", ("smoke", "shape sweep", "stability", "determinism", "edge shapes",
                                              "timing"), "kernel_fn ", "cpu"),
    "behaves_by_call_stack": ("FAIL", "timing", "the call stack", "cpu"),
    "behaves_by_timing_phase": ("FAIL", "timing", "the timing phase", "cpu"),
    "returns_uninitialized_memory": ("FAIL", "smoke", "nan where the reference has", "cpu"),
    "reads_reference_from_memory": ("FAIL", "smoke", "the kernel called gc.get_objects", "cpu"),
    "returns_tensor_subclass": ("FAIL", "smoke", "a subclass of torch.Tensor", "cpu"),
    # Its ring of buffers comes round to an output the judge checked earlier: any stage after the third call.
    "persistent_output_buffers": ("FAIL", ("shape sweep", "stability", "determinism", "edge shapes", "timing"),
                                  "returned an output it had returned on an earlier call", "cpu"),
    "changes_global_state": ("FAIL", "load", "torch.backends.cuda.matmul.allow_tf32 False -> True", "cpu"),
    # torch.max / torch.min(x, dim): (values, indices), the indices exact, each tensor a fresh one of its own.
    # Ties can turn up in random bfloat16 lines too: the shape sweep may catch the tie attack first.
    "indices_last_of_ties": ("FAIL", ("shape sweep", "stability"), "of equal values the first one's", "cpu"),
    "indices_skip_nan": ("FAIL", "stability", "indices: ", "cpu"),
    "indices_lost_on_inf_lines": ("FAIL", "stability", "got -1, expected 0", "cpu"),
    "indices_from_torch": ("FAIL", "shape sweep", "kernel_fn called aten::argm", "cpu"),
    "indices_as_int32": ("FAIL", "shape sweep", "indices: output dtype torch.int32, expected torch.int64", "cpu"),
    "values_alias_input": ("FAIL", "shape sweep", "output shares memory with its input 'x'", "cpu"),
    "stale_indices_by_shape": ("FAIL", "shape sweep", "indices: ", "cpu"),
    "stale_indices_when_timed": ("FAIL", "timing", "changes behaviour with the call count", "cpu"),
    # Refused as the thread starts (worker_guards.NoThreads); one started at import and left running fails at load on
    # the thread count (tests/test_worker.py).
    "leaves_thread_running": ("FAIL", "smoke", "kernel_fn started a thread", "cpu"),
    # Issue 24: the verdict out of the candidate's reach (its pipe, its descriptors, the judge's /proc entries).
    "writes_verdict_through_proc_fd": ("FAIL", "load", "another process's fd", "cpu"),
    "thread_outlives_kernel_fn": ("FAIL", "smoke", "kernel_fn started a thread", "cpu"),
    # Red team: PyTorch's compute where the worker's dispatch mode does not see it. A thread of kernel_fn's own is
    # refused as it starts (worker_guards.NoThreads); the mode set aside is seen by the source check alone
    # (SOURCE_CHECK_ONLY, below): judged with it on, its entry here is the source check's refusal.
    "torch_compute_in_a_thread": ("FAIL", "smoke", "kernel_fn started a thread", "cpu"),
    "torch_compute_with_modes_disabled": ("FAIL", "load",
                                          "imports _disable_current_modes from torch.utils._python_dispatch", "cpu"),
    # Red team: timings forged in the candidate's process, which reports them. The judge's own clock runs from its
    # request (a seed drawn just then) to the proof of the output, and bounds the worker's figures from below
    # (timing.proof_problem); a process the worker leaves running, such as a relay, fails as soon as the worker
    # answers (judge_link.CandidateWorker.check_alone).
    "silences_the_tamper_check": ("FAIL", "timing", "did not time the work it did", "cpu"),
    "forges_timing_through_a_relay": ("FAIL", "load", "other process(es) still running", "cpu"),
    # Round 3: the work off the judge's clock, before the worker's "started" or ahead from a seed it could predict.
    "computes_before_the_clock_starts": ("FAIL", "timing", "did not time the work it did", "cpu"),
    "precomputes_the_next_call": ("FAIL", "timing", "returned a wrong result", "cpu"),
    # Round 4: on a CPU the judge also reads the worker's CPU time, which a forked child's work is not on; a process
    # born below the judge during a call sends it back to its wall clock (autokernel/judge/worker_cpu.py).
    "computes_in_a_forked_child": ("FAIL", "timing", "did not time the work it did", "cpu"),
    # Round 4: a helper whose first thread exited looked like a zombie to the judge's process walk while it computed.
    "helper_whose_first_thread_exited": ("FAIL", "load", "other process(es) still running", "cpu"),
    # Red team (session 9): wrong for a user's model, right on every input the judge drew before.
    "softmax_shift_never_negative": ("FAIL", "stability", "[large negative values", "cpu"),
    "cross_entropy_lse_in_input_dtype": ("FAIL", "stability", "[confident logits", "cpu"),
    # Issue 35 follow-up (session 18): the router no longer sends padded batches to PyTorch; the judge draws them.
    "cross_entropy_counts_ignored_targets": ("FAIL", "stability", "[ignored targets", "cpu"),
    "rotary_recomputes_its_tables": ("FAIL", "smoke", "elements wrong", "cpu"),
    "rmsnorm_ignores_eps": ("FAIL", "stability", "[eps 1e-05 near the rows' scale", "cpu"),
    "matmul_ignores_b_strides": ("FAIL", "stability", "[a Linear's weight", "cpu"),
    "layernorm_ignores_eps": ("FAIL", "stability", "[eps 0.01 near the rows' scale", "cpu"),
    "rmsnorm_linear_ignores_eps": ("FAIL", "stability", "[the model's own eps", "cpu"),
    "rmsnorm_mlp_ignores_eps": ("FAIL", "stability", "[the model's own eps", "cpu"),
    "summation_order_by_input_address": ("FAIL", "determinism", "at another address", "cpu"),
    # Judged with the source check on (SOURCE_CHECK_ONLY); the user's-process check rejects it at run time.
    "honest_only_under_autokernel": ("FAIL", "load", "imports sys", "cpu"),
    # Red team, round 2: a path per argument (not causal, gelu) or an input range (positions) the judge never drew.
    "attention_unshifted_when_not_causal": ("FAIL", "stability", "[large scores, not causal", "cpu"),
    "mlp_gelu_naive_tanh": ("FAIL", "stability", "[large activations, gelu", "cpu"),
    # A region's kernel: its definition is in tests/attacks/regions/ (every attack is judged with that folder in
    # AUTOKERNEL_REGION_DIRS), judged in the region's own dtype.
    "region_positions_read_as_bytes": ("FAIL", "stability", "[wide range", "cpu"),
    # Round 3: secrets raised in an error. The judge reports the error; the runner takes the secrets out of it.
    "raises_what_it_read": ("CRASH", "load", "RuntimeError: the secrets: ", "cpu"),
    "side_stream_launch": ("FAIL", "smoke", "side stream", "gpu"),
    "rerecords_timer_events": ("FAIL", "timing", "the timer", "gpu"),
    "changes_allocator_settings": ("FAIL", "load", "changed torch's global state", "gpu"),
    # CUDA C++ kernel files (BACKEND = "cuda"): they need nvcc and a GPU (benchmarks/cuda_check.py backend runs them too).
    # "ran the library kernel <name>" where the name carries a library's mark, else "ran the kernel <name>,
    # which is neither ...": rejected either way; the message names the kernel.
    "cuda_decoy_then_cublas": ("FAIL", "smoke", "kernel_fn ran the", "gpu"),
    "cuda_decoy_then_aten_matmul": ("FAIL", "smoke", "kernel_fn called aten::", "gpu"),
    "cuda_side_stream_launch": ("FAIL", "smoke", "on a side stream", "gpu"),
    "cuda_decoy_named_like_library": ("FAIL", "smoke", "like a library's", "gpu"),
}

# Attacks on what surrounds the judge (issue 24), judged as the loop judges, through runner.run_bench and its
# sandbox: name -> (correctness, a piece of the message). The judge, a child subreaper, sees the daemon first (it
# stays below the judge, double fork and all) and kills it with the worker; the sandbox's PID namespace and the
# launcher's count of what is left are the layer behind (a run that left a process behind is a CRASH).
RUNNER_ATTACKS = {
    "daemon_rewrites_verdict": ("FAIL", "other process(es) still running"),
    "daemon_writes_after_the_run": ("FAIL", "other process(es) still running"),
}

# The judge reads every kernel file's source before any of it runs (autokernel/judge/source_check.py): what the
# file imports, which builtins and attributes it reaches, what PyTorch does outside its @triton.jit code. Most attack
# files here load their honest part with runpy, which the source check refuses by itself, so ATTACKS are judged with
# the check off (SOURCE_CHECK_ENV=0): they test the runtime guards behind it. SOURCE_CHECK: each attack whose trick
# the source check sees, and the piece of its refusal that names the trick (tests/test_source_check.py).
SOURCE_CHECK = {
    "forge_result_at_import": "uses open",
    "rewrite_checker_at_import": "uses setattr",
    "replace_timer_at_import": "imports time",
    "decoy_launch_returns_torch": "uses torch.softmax",
    "behaves_by_call_stack": "imports sys",
    "reads_reference_from_memory": "imports gc",
    "returns_tensor_subclass": "defines __torch_function__",
    "changes_global_state": "assigns torch.backends.cuda.matmul.allow_tf32, an attribute of a module",
    "indices_from_torch": "uses torch.argmax",
    "leaves_thread_running": "imports threading",
    "writes_verdict_through_proc_fd": "uses os",
    "thread_outlives_kernel_fn": "imports threading",
    "torch_compute_in_a_thread": "imports threading",
    "torch_compute_with_modes_disabled": "imports _disable_current_modes from torch.utils._python_dispatch",
    "silences_the_tamper_check": "imports worker_tampering from autokernel.judge.candidate",
    "forges_timing_through_a_relay": "imports socket",
    "computes_before_the_clock_starts": "imports worker_tampering from autokernel.judge.candidate",
    "precomputes_the_next_call": "imports worker_tampering from autokernel.judge.candidate",
    "honest_only_under_autokernel": "imports sys",
    "changes_allocator_settings": "reads the private attribute _set_allocator_settings",
    "rerecords_timer_events": "reads the attribute f_back",
    "cache_by_address_and_version": "reads the private attribute _version",
    "raises_what_it_read": "uses open",
    "daemon_rewrites_verdict": "imports ctypes",
    "daemon_writes_after_the_run": "imports ctypes",
}

# Attacks the worker's runtime guards alone do not reject, and why: bench.py rejects each by its source check
# (SOURCE_CHECK), and tests/test_attacks.py judges them with it on (their ATTACKS entry is its refusal, at load).
# docs/threats.md says what the runtime second line misses. No attack is an open hole of bench.py.
SOURCE_CHECK_ONLY = {
    # No observer inside the candidate's process sees every PyTorch op: a dispatch mode is set aside from Python
    # (_disable_current_modes, _DisableTorchDispatch, an excluded dispatch key), or an op is called below it
    # (OpOverload.redispatch with a key set without Python), and nothing is left changed once kernel_fn returns.
    "torch_compute_with_modes_disabled": "_disable_current_modes / _DisableTorchDispatch set the guard aside",
    # Every call bench.py makes runs in a process that has its worker's modules loaded, and no output check can tell
    # that process from a user's; the user's-process check (ALSO_REJECTED_IN_THE_USERS_PROCESS) runs it where they
    # are not loaded, before the loop keeps a kernel.
    "honest_only_under_autokernel": "the kernel reads sys.modules and is honest only where the judge or verify is",
}

BENCH_ARGS = {
    "stale_indices_when_timed": ["--shape", "O=4,R=64,I=8,op=max_dim"],
    "region_positions_read_as_bytes": ["--dtype", "float32"],
}
REGION_DIRS = "regions"      # under tests/attacks/: the region definitions the region attacks are of

# Attacks on the user's process (red team, round 3): each PASSes bench.py and was kept; the user's-process check that
# runs before a candidate is kept (autokernel/judge/user_check.py) rejects it. name -> a piece of its message. Older
# attacks it rejects too are listed beside them (they are judged by bench.py as well, above).
USER_PROCESS_ATTACKS = {
    "wrong_after_500_calls": "call 501 (many calls",
    "rows_past_8192_never_written": "past the job's largest, 8193+ rows, M=8193",
    "writes_into_an_earlier_input": "still held by the caller, changed: a kernel must never write into a tensor",
    "ping_pong_outputs_patching_equal": "importing the kernel changed torch.equal",
    "honest_only_where_home_is_unreadable": "wrong output",
    "honest_only_where_tmpdir_is_the_workers": "wrong output",
}
ALSO_REJECTED_IN_THE_USERS_PROCESS = {
    "persistent_output_buffers": "shares memory with output 0 of call",
    "honest_only_under_autokernel": "wrong output",
}

# Ways out of the sandbox (red team, round 3), judged through runner.run_bench as the loop judges them: each kernel is
# honest and tries its way out at import; tests/test_sandbox_ways_out.py checks that what it tried did not happen.
# name -> what the test checks.
SANDBOX_ATTACKS = {
    "udp_to_localhost": "the test's UDP listener on 127.0.0.1 receives nothing (network namespace)",
    "unix_socket_by_path": "the test's Unix socket accepts no connection (socket filter)",
    "ssh_agent_signs": "the test's ssh-agent gets no connection; SSH_AUTH_SOCK unset, its folder unreadable",
    "sysv_shm_outlives_the_run": "no segment or queue of its key in /proc/sysvipc after the run (IPC namespace)",
    "memfd_past_the_memory_cap": "the run is stopped before the memfd holds its 4 GiB (memory cgroup)",
}
