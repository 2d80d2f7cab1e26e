"""The fixed judge, at its place in the layout: check a kernel in five correctness stages, then time it against PyTorch.

    python bench.py [--kernel kernel.py] [--shape M=4096,N=4096 ...] [--dtype float16]
                    [--seed N] [--compare-compile] [--quick | --screen] [--one-dtype] [--json | --json-out FILE]
                    [--result-fd N]

This door runs the judge's module, autokernel/judge/bench.py, as `python -m autokernel.judge.bench` does (the loop
starts it that way): its docstring and `--help` describe the stages, the output and the exit codes (0 PASS, 1 FAIL,
2 CRASH, 3 TIMEOUT). The agent never edits this file.
"""

import runpy

if __name__ == "__main__":
    # The module's own first lines record the judge's sources and start the kernel's worker before anything heavy.
    runpy.run_module("autokernel.judge.bench", run_name="__main__", alter_sys=True)
