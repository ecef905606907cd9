"""Evaluation helpers: packaged math datasets, answer grading and answer voting."""
