"""norm op family (being written)."""

OPS: tuple = ()
