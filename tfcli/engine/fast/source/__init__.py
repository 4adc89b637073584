"""The kernels' sources: build-time code, compiled once per machine by build.py in a process of its
own. The only room that imports numba (and llvmlite's IR builder): the process that multiplies
never imports these modules, except pool.py's field layout, which imports neither.
Imports nothing."""
