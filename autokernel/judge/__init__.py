"""The judge: what decides whether a kernel is correct and how fast it is.

The judge's process, `bench` (`python -m autokernel.judge.bench`; bench.py in the layout is its door), and its
modules (the stages, the timing stage, the verdict, the one tolerance rule, the timed call, the hardware's limits,
the link to the candidate's worker, CUDA builds and launches, the judge's own files), `candidate/` (the candidate's
process), and `runner`, which runs the judge and any other candidate code in the sandbox and reads the verdict
(docs/judge.md). The judge's process imports judge_files first: this file imports nothing.
"""
