"""optim op family (being written)."""

OPS: tuple = ()
