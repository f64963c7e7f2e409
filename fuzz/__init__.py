"""Hypothesis strategies, the targets registry, campaign runner and mutants."""
