"""The fast room's loader: where compiled kernels live on disk (compiled.py), loading their object
files into executable memory (elf.py) and calling them (kernels.py), and the 2 MB pages the copied
weights live in (pages.py). Imports nothing."""
