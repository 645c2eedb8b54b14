"""Devices: the spec, the GPU data-sheet table, and probing the device at hand."""
