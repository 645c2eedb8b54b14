"""memory op family (being written)."""

OPS: tuple = ()
