"""The overnight keep-or-revert loop: profile a model, then optimize its hottest kernels one at a time in git.

    python orchestrate.py MODEL [flags]        # the same as: autokernel optimize MODEL [flags]

For each kernel job, in Amdahl order:
  1. the job's starter is copied into kernel.py, committed as the baseline and benched twice;
  2. the agent proposes a complete new kernel.py, committed as "exp N: <description>";
  3. bench.py judges it in the sandbox (autokernel/judge/runner.py, autokernel/sandbox/launcher.py) with a time
     limit: first the quick judge (fewer sweep and edge shapes) as a screen, then, only for a
     candidate that passes it and looks faster, the full judge, whose verdict and timing count;
     around the bench, autokernel/search/integrity.py checks the candidate changed nothing but kernel.py;
  4. the candidate is KEPT when it passes and beats the best so far by more than the noise, otherwise
     `git reset --hard` returns to the last kept commit. Every experiment gets a results.tsv row.

The noise rule: the two baseline runs give latencies a and b; noise = |a - b| / min(a, b), never
below `noise_floor` (2 %). A candidate is kept when best_latency / candidate_latency > 1 + noise,
so a change that timing jitter alone could explain is not kept.

A kernel is done after `max_consecutive_reverts` reverts in a row, at `peak_fraction_target` of
the hardware peak, after `kernel_time_s` on it, at `target_speedup` over its baseline, or when the
agent has nothing left to try. Its best version is then committed as
optimized_kernels/<rank>_<type>.py and recorded in optimized_kernels/manifest.json. The budget
(time, and with --max-cost the estimated LLM cost) ends the run cleanly after saving the current
kernel's best so far; `--resume` goes on from there.

With --gpus N (N > 1) each GPU gets a judge worker, several candidates of a job are judged at once,
and the jobs run side by side, at most one per GPU, each with its own best and rules; their commits
interleave on the one branch, each naming its job ("exp N (1_softmax): ...").

Where the pieces live: autokernel/search/session.py (checks, start, resume, return to the user's branch),
autokernel/search/loop.py (the loop and the order of its writes), autokernel/search/parallel_loop.py (several
GPUs), autokernel/search/run_state.py (state.json), autokernel/search/budget.py (the clock and bench limits),
autokernel/profile/planning.py (profile and extract).
"""

import sys

if __name__ == "__main__":
    from autokernel import cli

    sys.exit(cli.main(["optimize", *sys.argv[1:]]))
