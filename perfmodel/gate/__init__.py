"""The CI gate: baselines of E2E error, the verdict, and the gate-stability experiment."""
