"""Execution traces: capture, parse, the task graph, host overheads and named regions."""
