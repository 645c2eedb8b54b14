"""Measuring: the timer, one op's benchmark, collectives, host probes (allocator, drift, contention)."""
