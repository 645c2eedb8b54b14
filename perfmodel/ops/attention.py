"""attention op family (being written)."""

OPS: tuple = ()
