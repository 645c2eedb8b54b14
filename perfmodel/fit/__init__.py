"""Fitting per-op predictors: estimators, model selection, persistence and error metrics."""
