"""The fast room's run-time side: the fast executor (fast_executor.py), the float32 products and
attention on NumPy and BLAS (dense_ops.py), the quantized products on the compiled kernels
(kernel_products.py) and the compiled blocks' driver (blocks.py), prompt parts (parts.py), 8-bit
activations (activations.py), interleaved weight rows (interleave.py), a batch's top-k (top.py).
Imports nothing: each module is imported where it is used."""
