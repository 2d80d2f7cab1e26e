"""Regions: any fusible piece of a model as a kernel job, beside the menu of kernel types.

capture.py traces the model into ATen graphs; partition.py cuts them into regions (maximal groups of
pointwise, reduction, normalization, scan and indexing ops, a GEMM with its epilogue); graph.py is a
region's definition as data and its interpreter (the judge's reference); inputs.py draws inputs in
each op's domain; record.py and store.py are the region's file; kernel_type.py makes it a registry
entry. find.py puts them together for the profiler. (docs/architecture.md, "Regions".)
"""
