#!/bin/bash
# usage: run.sh NAME MODEL_ARGS...   one verify --starters on the CPU; appends "name, exit, seconds, verdict" to
# /tmp/ho/results.tsv and keeps its output in /tmp/ho/NAME.log (the survey's model files are beside this script,
# kept as .py.txt, results being data: copied to /tmp/ho/*.py, where the model arguments name them).
cd "$(dirname "$0")/../../.." && export PYTHONPATH=$PWD TRITON_INTERPRET=1
here=benchmarks/results/2026-11-29_cpu_heldout_survey_s17
mkdir -p /tmp/ho
for f in $here/*.py.txt; do cp "$f" /tmp/ho/"$(basename "$f" .txt)"; done
name=$1; shift
rm -rf /tmp/ho_$name
start=$(date +%s)
timeout 600 python verify.py "$@" --starters --workspace /tmp/ho_$name --dtype float32 \
    > /tmp/ho/$name.log 2>&1
rc=$?
verdict=$(grep -m1 -iE "verdict|no speed" /tmp/ho/$name.log | cut -c1-150)
printf "%s\t%s\t%s\t%s\n" "$name" "$rc" "$(($(date +%s) - start))" "$verdict" >> /tmp/ho/results.tsv
