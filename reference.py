"""The PyTorch references: the oracle every kernel type is judged against.

Each function defines what its kernel type computes, and its signature is the one every
`kernel_fn` of that type must accept. They live in autokernel/kernel_types/references.py, so that the installed
package has them; this file shows them where the layout promises them:

    python reference.py            # lists each kernel type's reference and its signature
"""

import inspect
import sys

from autokernel.kernel_types.references import (cross_entropy, flash_attention, fused_mlp, layernorm,  # noqa: F401
                                                 matmul, reduce, rmsnorm, rmsnorm_linear, rmsnorm_mlp,
                                                 rotary_embedding, softmax)

REFERENCES = (matmul, softmax, layernorm, rmsnorm, rmsnorm_linear, flash_attention, fused_mlp, rmsnorm_mlp,
              cross_entropy, rotary_embedding, reduce)


def main() -> int:
    for function in REFERENCES:
        print(f"{function.__name__}{inspect.signature(function)}\n    {inspect.getdoc(function).splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
