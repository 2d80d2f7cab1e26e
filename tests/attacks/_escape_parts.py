"""Shared parts of the attacks that try to get out of the sandbox (loaded with runpy; not an attack itself).

`target(name)` reads where a test listens (AUTOKERNEL_ATTACK_<NAME>: the sandbox passes AUTOKERNEL_ variables);
`note(line)` leaves a line where the test reads it (the kernel's own cache folder, which outlives a PASS).
Each attack then runs the honest softmax of _parts.py: it is judged correct, and what it tried is what the
test looks at.
"""

import os


def target(name):
    return os.environ.get(f"AUTOKERNEL_ATTACK_{name.upper()}")


def note(line):
    cache = os.path.dirname(os.environ.get("TRITON_CACHE_DIR", ""))
    try:
        with open(os.path.join(cache, "probe"), "a") as probe:
            probe.write(line + "\n")
    except OSError:
        pass
