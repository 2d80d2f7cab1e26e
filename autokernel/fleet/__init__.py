"""The judges of a run: one judge worker per GPU, on this machine (the local pool) or as Ray actors, and which
workers a run gets."""
