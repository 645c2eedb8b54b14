"""conv op family (being written)."""

OPS: tuple = ()
