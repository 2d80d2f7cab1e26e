"""From a model to kernel jobs: loading the model, the profiler's Amdahl ranking, attributing ops to kernel types,
the plan, and the jobs with their stamped starters (regions/: the model's own fusible regions)."""
