"""Kernels inside a model: the manifest of kept kernels, kernel files as ops, reading torch calls as kernel calls,
the router and its decisions, folded norms, regions routed in the model's graph, and `plug_in`."""
