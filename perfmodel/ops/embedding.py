"""embedding op family (being written)."""

OPS: tuple = ()
