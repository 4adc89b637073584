"""The fast room: what the executor door (engine/executor.py) opens onto. A reader may skip it.

Everything here computes what the textbook computes (engine/ops.py, engine/formats.py), faster, and
each piece has a test that holds it equal to its twin: compiled products on quantized blocks
(kernels.py, imported only when such a product first runs; their sources are jobs.py, llvm.py,
llvm_q8.py, llvm_x8.py, attention_job.py and block_job.py, compiled by build.py, loaded by
elf.py, run on pool.py's threads).
"""
