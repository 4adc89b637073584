"""The one argument of every compiled kernel (jobs.py): an int64 array `a`, whose slots hold the
addresses of the arrays and the sizes below. kernels.py fills it; the jobs read it. Imports nothing."""

X, T, K = 0, 1, 2  # x [T, K] float32, C order
BLOCK, GROUP = 3, 4  # x's values per scale, per sum (activations.layout)
XQ, XD, XS, XM = 5, 6, 7, 8  # quantized x: q [T*K] int8, d [T, K/BLOCK] float32, sums [T, K/GROUP] int32, xm [T, K/32] float32
ROWS, RB, KIND = 9, 10, 11  # a dequantization's stored weight rows (RB bytes each), their GGUF type id
OUT, LD = 12, 13  # out [T, LD] float32 (or [HI, LD] for a dequantization): row stride LD elements
LO, HI, CHUNKS = 14, 15, 16  # weight rows lo..hi-1, cut into CHUNKS chunks (jobs._chunk)
WQ, WD, WM, SC, MN, W32 = 17, 18, 19, 20, 21, 22  # scratch, one row per chunk (jobs.dequantize, jobs.product_floats)
PARTS, NPARTS = 23, 24  # a product's weight rows: a table [NPARTS, 5] int64, a row per part (below); rows 0..HI-1 in all
SLOTS = 25

# the columns of the parts table: where a part's rows are, their bytes each, their type, the column of out its first row
# fills, how many rows
P_ROWS, P_RB, P_KIND, P_COL, P_N = 0, 1, 2, 3, 4

# GGUF tensor type ids (formats.BLOCK_TYPES)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30

# the attention job's slots (jobs.attention): a decode step's queries over the KV cache
A_Q, A_ROWS, A_DH, A_HKV = 0, 1, 2, 3  # q [Hkv, ROWS, Dh] float32 (ROWS = G, a key/value head's queries)
A_K, A_KH, A_KD = 4, 5, 6  # keys [Hkv, Dh, S]: head and d strides in elements (the s stride is 1)
A_V, A_VH, A_VS = 7, 8, 9  # values [Hkv, S, Dh]: head and s strides (the d stride is 1)
A_S, A_OUT, A_CHUNKS, A_SCRATCH = 10, 11, 12, 13  # S keys; out [Hkv, ROWS, Dh]; chunks of the Hkv heads; [CHUNKS, ROWS, S] float32
A_SPLIT = 14  # each head's ROWS queries in this many parts, which the chunks share out with the heads
