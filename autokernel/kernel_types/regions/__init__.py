"""Regions: any fusible piece of a model as a kernel job, beside the menu of kernel types. Here, a region as a
kernel type.

capture.py traces the model into ATen graphs; graph.py is a region's definition as data and its interpreter (the
judge's reference); inputs.py draws inputs in each op's domain; record.py and store.py are the region's file;
kernel_type.py makes it a registry entry. Finding and planning regions is autokernel/profile/regions/, routing
them autokernel/routing/regions/ (docs/regions.md).
"""
