"""Finding and planning a model's regions: cutting its captured ATen graphs into regions, the menu they are
checked against, ranking them in the plan, and their starters, Inductor's code made a kernel file
(docs/regions.md). A region as a kernel type is autokernel/kernel_types/regions/."""
