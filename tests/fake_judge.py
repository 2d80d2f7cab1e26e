"""A stand-in for bench.py, for the pool and parallel-loop tests: the runner's protocol, none of the judging.

It is started exactly as bench.py is (autokernel/judge/runner.py: the sandbox, the allow-listed environment,
the nonce) and answers from the candidate file itself: its TUNABLES give the latency
(100 / A + 10 * B microseconds, so the built-in search has somewhere to go), `# fake-sleep: S` how long
the judging takes, `# fake-wait-for: PATH` a file to wait for first (up to a minute: a test orders
verdicts by events, not by racing sleeps), `# fake-verdict: V` a verdict other than PASS; it judges it as its KERNEL_TYPE. The message says whether the
judge's environment held anything that looks like an API key, and which GPU it was pinned to.
Standard library only: it starts in milliseconds.
"""

import argparse
import ast
import json
import os
import re
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--dtype")
    args, _ = parser.parse_known_args()
    source = open(args.kernel).read()
    literals = {node.targets[0].id: ast.literal_eval(node.value) for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("TUNABLES", "KERNEL_TYPE")}
    tunables = literals["TUNABLES"]
    sleep = re.search(r"# fake-sleep: ([\d.]+)", source)
    verdict = re.search(r"# fake-verdict: (\w+)", source)
    print("STAGE smoke", flush=True)
    wait_for = re.search(r"# fake-wait-for: (\S+)", source)
    deadline = time.monotonic() + 60.0
    while wait_for and not os.path.exists(wait_for.group(1)) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(float(sleep.group(1)) if sleep else 0.0)
    latency = 100.0 / tunables["A"] + 10.0 * tunables["B"]
    keys = sorted(name for name in os.environ if "API_KEY" in name or "TOKEN" in name)
    correctness = verdict.group(1) if verdict else "PASS"
    result = {"correctness": correctness, "kernel_type": literals.get("KERNEL_TYPE", "softmax"), "latency_us": latency,
              "throughput": 1e4 / latency, "timings_meaningful": False, "seed": args.seed, "dtype": args.dtype,
              "message": f"keys seen: {keys or 'none'}; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}",
              "nonce": os.environ.get("AUTOKERNEL_RESULT_NONCE")}
    with os.fdopen(args.result_fd, "w") as handle:
        json.dump(result, handle)
    return 0 if correctness == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
