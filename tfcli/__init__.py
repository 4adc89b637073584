"""tfcli: a readable NumPy transformer, and a command line that shows what it is made of."""

import os

# OpenBLAS's idle threads spin for about 0.1 s after each threaded product before they sleep. A
# batch step or a lookup check runs its products on two threads of its own (engine/fast/ops.py, few_rows),
# and a spinning BLAS thread then takes half a core from them: a 16-token pass right after a
# decode step took 80 ms instead of 51. 2^20 cycles (under a millisecond) still keeps the threads
# awake between the products of a decode step. Read when NumPy loads OpenBLAS, so it is set here,
# before anything imports NumPy; a value already in the environment wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

__version__ = "0.1.0"
