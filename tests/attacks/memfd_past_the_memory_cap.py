"""Attack (red team, round 3): hold memory in a memfd, past the sandbox's memory cap.

The cap polled the processes' resident sets, which count only what is mapped: bytes written into a memfd
are held by no mapping. The sandbox's memory cgroup counts them: the run is killed at the cap (where no
cgroup can be had, the run says that this protection is missing).
"""

import os
import runpy
from pathlib import Path

KERNEL_TYPE = "softmax"
_here = Path(__file__).with_name
_escape = runpy.run_path(str(_here("_escape_parts.py")))
_held = os.memfd_create("cache")
_chunk = b"\x01" * (64 << 20)
for _ in range(int(_escape["target"]("mib") or 4096) // 64):
    os.write(_held, _chunk)
_escape["note"]("memfd filled")
kernel_fn = runpy.run_path(str(_here("_parts.py")))["honest_kernel_fn"]
