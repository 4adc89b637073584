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
SLOTS = 33

# the columns of the parts table: where a part's rows are, their bytes each, their type, the column of out its first row
# fills, how many rows
P_ROWS, P_RB, P_KIND, P_COL, P_N = 0, 1, 2, 3, 4

# GGUF tensor type ids (formats.BLOCK_TYPES)
F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
X8 = 256  # added to a type id in the parts table (P_KIND): its rows interleaved 8 at a time (interleave.py), P_RB bytes a group

# the top-k job's slots (top_job.top_k): each row's candidates for sampling (sampling.top_k_ids)
TK_ROWS, TK_V, TK_K, TK_OUT, TK_CAP, TK_COUNT, TK_COLS_AT, TK_VALS = 0, 1, 2, 3, 4, 5, 6, 7  # rows' addresses [B] int64 (float32 [V] each);
# V; each row's k [B] int64; ids [B, CAP] int64; CAP; each row's count [B] int64; scratch [B, 3 x TK_COLS] float32 and [B, CAP] float32
TK_COLS = 1024  # the columns whose maxima bound a row's k-th largest value (k at most this)

# the attention job's slots (attention_job.attention): a decode step's queries over the KV cache
A_Q, A_ROWS, A_DH, A_HKV = 0, 1, 2, 3  # q [Hkv, ROWS, Dh] float32 (ROWS = G, a key/value head's queries)
A_K, A_KH, A_KS = 4, 5, 6  # keys [Hkv, S, Dh]: head and s strides in elements (the d stride is 1)
A_V, A_VH, A_VS = 7, 8, 9  # values [Hkv, S, Dh]: head and s strides (the d stride is 1)
A_S, A_OUT, A_CHUNKS, A_SCRATCH = 10, 11, 12, 13  # S keys; out [Hkv, ROWS, Dh]; chunks of the Hkv heads; [CHUNKS, ROWS, S] float32
A_SPLIT = 14  # each head's ROWS queries in this many parts, which the chunks share out with the heads
A_COUNT, A_SHARE, A_TABLE = 15, 16, 17  # more than one row (a batch step): how many, the chunks sharing them, the address of their slots [COUNT, SLOTS]
# a row of the compiled blocks (block_job.py) first makes its queries, key and value from its Q/K/V product (attention_job._prep)
A_PREP, A_QKV, A_ORDER, A_BQKV = 18, 19, 20, 21  # PREP (and PREP_ONLY: no attention in this call) or 0; the product [(H+2Hkv)*Dh]; its columns' order (0: none); the bias (0: none)
A_QNORM, A_KNORM, A_QSCALE, A_EPS = 22, 23, 24, 25  # [Dh] each (0: none); the queries' factor and the norms' eps, as float32 bits
A_COS, A_SIN, A_HALF, A_NHEAD, A_COL = 26, 27, 28, 29, 30  # RoPE's cos and sin [R/2] at the row's position; R/2; H; the cache's column from A_K, A_V on
A_TAKE = 31  # several rows: in the k-th row of slots, the row that chunk k takes (block_job: the rows with the most keys first)
A_QZ = 32  # several rows: the address of the layer's row of the layer table (L_*), whose W_o calls a row quantizes its output for (0: none)
PREP, PREP_ONLY = 1, 2
A_THREADS_FROM = 1 << 18  # S x Hkv x G x Dh multiply-adds from which a call is shared among threads (kernels.attention, block_job)

# the decode blocks' slots (jobs.decode_blocks): T rows (a decode step, a few rows, a batch step) through blocks FROM..L-1
B_RUN, B_POOL, B_ATTENTION, B_THREADS = 0, 1, 2, 3  # tfcli_run's address, the pool's (0: none), the attention job's, threads
B_T, B_D, B_H, B_HKV, B_DH, B_F, B_R2 = 4, 5, 6, 7, 8, 9, 10  # rows, sizes; R2: rotated pairs per head (R/2)
B_FROM, B_L, B_LAYERS, B_EPS = 11, 12, 13, 14  # blocks FROM..L-1; the layer table [L, LS] int64 (L_* below); eps as float32 bits
B_X, B_HB, B_QKV, B_QM, B_Z, B_O, B_GU, B_ACT, B_MO = 15, 16, 17, 18, 19, 20, 21, 22, 23  # float32 buffers (jobs.decode_blocks)
B_COS, B_SIN, B_ROWS = 24, 25, 26  # RoPE's cos and sin [T, R2] at the rows' positions; the row table [T, RS] int64 (R_* below)
B_SCRATCH, B_ASLOTS = 27, 28  # attention's scratch [THREADS or T, G, S] float32; an int64 [T, SLOTS] for its calls
B_COS2, B_SIN2, B_QSCALE = 29, 30, 31  # the second RoPE's tables (Gemma 3's local layers); queries' factor as float32 bits
B_SHARED = 32  # 1: every row's key and value written before any row attends (rows of a sequence see each other's), else each row alone
B_ROWJOB, B_SELF, B_STAGE, B_LAYER = 33, 34, 35, 36  # block_rows' address, this array's; its stage and layer now
B_SLOTS = 37
STAGE_START, STAGE_O, STAGE_MLP, STAGE_MO = 0, 1, 2, 3  # block_rows' stages: before W_qkv; after W_o, after gate/up, after W_down

# the layer table's columns: weights' addresses (0: none), where the layer's cache is, and its products' calls
L_NORM1, L_NORM2, L_QNORM, L_KNORM, L_BQKV, L_BO = 0, 1, 2, 3, 4, 5  # [D], [D], [Dh], [Dh], [(H+2Hkv)*Dh], [D]
L_ORDER, L_SLIDING, L_CACHE, L_WINDOW = 6, 7, 8, 9  # Q/K/V's columns among the stored ones [(H+2Hkv)*Dh] int64; sliding?, index; window
L_POST1, L_POST2, L_ROPE, L_ACT = 10, 11, 12, 13  # norms of the attention's and the MLP's outputs [D] (Gemma 3); RoPE 0 or 1; 0 SiLU, 1 tanh GELU
L_CALLS = 14  # matrix m (0 Q/K/V, 1 O, 2 gate/up, 3 down), call j (0, 1): first job, job, its slots' address, chunks
LS = L_CALLS + 4 * 2 * 4

# the row table's columns: where a row's keys and values are (addresses, strides in elements) and its position
R_KG, R_KG_L, R_KG_H, R_KG_S = 0, 1, 2, 3  # keys of the layers that keep every position [L', Hkv, room, Dh]
R_VG, R_VG_L, R_VG_H, R_VG_S = 4, 5, 6, 7  # their values [L', Hkv, room, Dh]
R_KW, R_KW_L, R_KW_H, R_KW_S = 8, 9, 10, 11  # the sliding layers' keys [Ls, Hkv, room', Dh], row c holding position OFF + c
R_VW, R_VW_L, R_VW_H, R_VW_S = 12, 13, 14, 15  # their values
R_OFF, R_POS, R_SLIDES = 16, 17, 18  # OFF; the row's position; whether its cache keeps sliding layers apart (L_SLIDING, L_CACHE), else layer l is l in R_KG
RS = 19
