"""A region routed inside the model: its ops matched in the model's graph (eagerly and under torch.compile) and
replaced by the kept kernel where it was measured faster (docs/regions.md)."""
