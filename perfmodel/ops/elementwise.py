"""elementwise op family (being written)."""

OPS: tuple = ()
