"""Replay cases: E2E captures stored as plain data (:mod:`perfmodel.replay.case`) and
predicted again with the current code and a stored fit (:mod:`perfmodel.replay.rerun`)."""
