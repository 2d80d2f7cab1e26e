"""AutoKernel: makes a PyTorch model faster by optimizing its hottest GPU kernels; the package's public entry points."""

_PUBLIC = ("optimize", "plug_in", "unplug", "compile_backend", "fold_batch_norms", "unfold_batch_norms",
           "concat_linears", "unconcat_linears")


def __getattr__(name: str):
    # Loaded on first use, not on import: every `from autokernel import paths` runs this file, and
    # the API pulls in torch, the profiler and the optimization loop.
    if name in _PUBLIC:
        from autokernel import api

        return getattr(api, name)
    raise AttributeError(f"module 'autokernel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
