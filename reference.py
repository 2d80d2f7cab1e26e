"""The PyTorch references: the oracle every kernel type is judged against.

Each function defines what its kernel type computes, and its signature is the one every
`kernel_fn` of that type must accept. They live in autokernel/kernel_types/references.py, so that the installed
package has them; this file shows them where the layout promises them:

    python reference.py            # lists each kernel type's reference and its signature
"""

import inspect
import sys

from autokernel.kernel_types.registry import REGISTRY

# Read from the registry, not listed by hand, so a new kernel type is shown without an edit here; each reference is
# also this module's attribute under its type's name (reference.softmax), as kernel files and tests read them.
REFERENCES = tuple(kernel_type.reference for kernel_type in REGISTRY.values())
globals().update({name: kernel_type.reference for name, kernel_type in REGISTRY.items()})


def main() -> int:
    for function in REFERENCES:
        print(f"{function.__name__}{inspect.signature(function)}\n    {inspect.getdoc(function).splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
