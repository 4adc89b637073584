"""Accounting and summaries computed from shapes and numbers alone: no files, no printing.

`params/` counts parameters, FLOPs and memory from a model's shape (a ModelConfig) and holds the
shapes of published models: pure Python on ints, so `tfcli params --preset ...` starts without NumPy.
This file imports nothing, so that importing one module of the package never loads the others.
"""
