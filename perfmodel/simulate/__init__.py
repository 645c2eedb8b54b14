"""From a task graph and per-op predictions to an iteration time."""
