"""The kernels' sources: build-time code, compiled once per machine by build.py in a process of its
own. The only room that imports numba (and llvmlite's IR builder): the process that multiplies
never imports these modules, except pool.py's field layout and each block format family's layout,
which import neither. One folder per family, as ggml keeps a format's layout and kernels together:
blocks32/ (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and k_quants/ (Q4_K, Q5_K, Q6_K), each with its records
drawn and its facts in __init__.py (NumPy) and its vector code in dot.py.
Imports nothing."""
