# The call that measured branch wide-p (328dfb2) against main 1efccdf: the branch's kernels/flash_attention.py was
# carried as wide_p/flash_attention.py (an untracked folder) and copied over the starter for its runs.
set -o pipefail
(git log -1 --oneline; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__)"; date) > $OUT/device.txt 2>&1
cp kernels/flash_attention.py /tmp/main_fa.py
start=$(date +%s)
cp wide_p/flash_attention.py kernels/flash_attention.py
timeout 200 python bench.py --kernel kernels/flash_attention.py > $OUT/judge_widep.log 2>&1; echo "judge rc=$? $(( $(date +%s) - start )) s" >> $OUT/device.txt
for r in 1 2 3; do for v in main widep; do
  [ $(( $(date +%s) - start )) -gt 430 ] && break 2
  if [ $v = widep ]; then cp wide_p/flash_attention.py kernels/flash_attention.py; else cp /tmp/main_fa.py kernels/flash_attention.py; fi
  python benchmarks/kernels.py compare --types flash_attention --dtypes float16 --repeats 3 --out /tmp/cmp_$v$r >> $OUT/cmp_$v.log 2>&1
  echo "$v round $r done at $(( $(date +%s) - start )) s" >> $OUT/device.txt
done; done
cp /tmp/main_fa.py kernels/flash_attention.py
