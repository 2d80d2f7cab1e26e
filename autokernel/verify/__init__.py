"""The end-to-end proof: kept kernels plugged into the model in a sandboxed child, the six variants timed, the
route table measured, the verdict and its report, the handover to `autokernel.optimize`, and problem scoring."""
