"""What each compiled job takes, declared once. Imports nothing of tfcli.

Every compiled job (source/jobs.py, attention_job.py, block_job.py) takes one int64
array `a`: addresses of arrays, sizes, float32 bits. Each class below names the fields of one kind
of job's array, in order: a field's position is where it is declared (0, 1, 2...), never a number
kept in step by hand. Both sides read a field by its name: the loader fills `a[Product.X]`
(load/kernels.py, run/blocks.py), the job reads `a[Product.X]` (@fields makes each
class a named tuple of ints, which numba reads as constants: the machine code is that of a literal
index).
"""

from __future__ import annotations

from collections import namedtuple


def fields(declared: type):
    """A job's fields, numbered in the order `declared` annotates them, from 0: a named tuple of
    ints (Product.X is 0, len(Product) how many), which numba reads as constants."""
    names = list(declared.__annotations__)
    kind = namedtuple(declared.__name__, names)
    kind.__doc__ = declared.__doc__
    return kind(*range(len(names)))


@fields
class Product:
    """A product of x with a matrix's weight rows, a dequantization, or x's quantization (jobs.py):
    the job computes chunk c of the rows LO..HI-1 (jobs._chunk cuts them)."""

    X: int  # x [T, K] float32, C order
    T: int
    K: int
    BLOCK: int  # x's values per scale (activations.layout)
    SUM_SIZE: int  # x's values per sum of q (activations.layout)
    XQ: int  # quantized x: q [T*K] int8
    XD: int  # its scales d [T, K/BLOCK] float32
    XS: int  # its sums [T, K/SUM_SIZE] int32
    XM: int  # d * sums of its blocks of 32 [T, K/32] float32 (the minimum term)
    ROWS: int  # a dequantization's stored weight rows, RB bytes each, of GGUF type KIND
    RB: int
    KIND: int
    OUT: int  # out [T, LD] float32 (or [HI, LD] for a dequantization): row stride LD elements
    LD: int
    LO: int  # weight rows LO..HI-1, cut into CHUNKS chunks (jobs._chunk)
    HI: int
    CHUNKS: int
    WQ: int  # scratch, one row per chunk (jobs.dequantize, jobs.product_floats)
    WD: int
    WM: int
    SC: int
    MN: int
    W32: int
    PARTS: int  # a product's weight rows: a table [NPARTS, len(PartColumn)] int64, a row per part
    NPARTS: int


@fields
class PartColumn:
    """The columns of a product's table of parts (Product.PARTS): rows 0..HI-1 over all its parts."""

    ROWS: int  # where the part's rows are
    RB: int  # their bytes each (interleaved: a group's)
    KIND: int  # their GGUF type id (formats.GGMLType), + X8 when interleaved
    COL: int  # the column of out its first row fills
    N: int  # how many rows


X8 = 256  # added to a type id in a part's KIND: its rows interleaved 8 at a time (run/interleave.py)


@fields
class Attention:
    """The attention job (attention_job.attention): a decode step's queries over the KV cache."""

    Q: int  # q [Hkv, ROWS, Dh] float32 (ROWS = G, a key/value head's queries)
    ROWS: int
    DH: int
    HKV: int
    K: int  # keys [Hkv, S, Dh]: head and s strides KH, KS in elements (the d stride is 1), of type KV
    KH: int
    KS: int
    V: int  # values [Hkv, S, Dh]: head and s strides VH, VS (the d stride is 1)
    VH: int
    VS: int
    S: int  # S keys
    OUT: int  # out [Hkv, ROWS, Dh]
    CHUNKS: int  # chunks of the Hkv heads
    SCRATCH: int  # [CHUNKS, ROWS, S] float32
    SPLIT: int  # each head's ROWS queries in this many parts, which the chunks share out with the heads
    # more than one row (a batch step): how many, the chunks sharing them, the address of their
    # fields [COUNT, SLOTS]
    COUNT: int
    SHARE: int
    TABLE: int
    # a row of the compiled blocks (block_job.py) first makes its queries, key and value from its
    # Q/K/V product (attention_job._prep)
    PREP: int  # PREP (and PREP_ONLY: no attention in this call) or 0
    QKV: int  # the product [(H+2Hkv)*Dh]
    ORDER: int  # its columns' order (0: none)
    BQKV: int  # the bias (0: none)
    QNORM: int  # [Dh] (0: none)
    KNORM: int  # [Dh] (0: none)
    QSCALE: int  # the queries' factor, as float32 bits
    EPS: int  # the norms' eps, as float32 bits
    COS: int  # RoPE's cos and sin [R/2] at the row's position
    SIN: int
    HALF: int  # R/2
    NHEAD: int  # H
    COL: int  # the cache's column from K, V on
    QZ: int  # several rows: the address of the layer's row of the layer table (LayerColumn), whose
    # W_o calls a row quantizes its output for (0: none)
    KV: int  # the keys' and values' numbers: KV_F32, KV_F16 or KV_Q8_0 (engine/kvcache.py's KV_TYPES)


PREP, PREP_ONLY = 1, 2  # Attention.PREP's flags
# Attention.KV, RowColumn.KV: float32, float16, or Q8_0 blocks (32 numbers in 34 bytes: a float16 scale, 32 int8).
# Strides and offsets in a cache count numbers, whatever the kind: a Q8_0 cache's number n is in block n // 32.
KV_F32, KV_F16, KV_Q8_0 = 0, 1, 2


def kv_kind(itemsize: int) -> int:
    """Attention.KV of a cache whose arrays' elements take `itemsize` bytes (4: float32, 2: float16, 1: the
    bytes of Q8_0 blocks)."""
    return {4: KV_F32, 2: KV_F16, 1: KV_Q8_0}[itemsize]


def kv_numbers(nbytes: int, itemsize: int) -> int:
    """The numbers `nbytes` bytes of a cache hold (a stride of its arrays: a multiple of a row)."""
    return nbytes // 34 * 32 if itemsize == 1 else nbytes // itemsize
ATTENTION_THREADS_FROM = 1 << 18  # S x Hkv x G x Dh multiply-adds from which a call is shared among threads

SLOTS = max(len(Product), len(Attention))  # an argument array's length: a thread's, a row's of Attention.TABLE


@fields
class Blocks:
    """The decode blocks' job (block_job.decode_blocks): T rows (a decode step, a few rows, a batch
    step) through blocks FROM..L-1."""

    RUN: int  # tfcli_run's address
    POOL: int  # the pool's (0: none)
    ATTENTION: int  # the attention job's
    THREADS: int
    T: int  # rows, and the sizes
    D: int
    H: int
    HKV: int
    DH: int
    F: int
    R2: int  # rotated pairs per head (R/2)
    FROM: int  # blocks FROM..L-1
    L: int
    LAYERS: int  # the layer table [L, LAYER_WIDTH] int64 (LayerColumn)
    EPS: int  # as float32 bits
    X: int  # float32 buffers (block_job.decode_blocks)
    HB: int
    QKV: int
    QM: int
    Z: int
    O: int  # noqa: E741
    GU: int
    ACT: int
    MO: int
    COS: int  # RoPE's cos and sin [T, R2] at the rows' positions
    SIN: int
    ROWS: int  # the row table [T, len(RowColumn)] int64 (RowColumn)
    SCRATCH: int  # attention's scratch [THREADS or T, G, S] float32
    ASLOTS: int  # an int64 [T, SLOTS] for its calls
    COS2: int  # the second RoPE's tables (Gemma 3's local layers)
    SIN2: int
    QSCALE: int  # queries' factor as float32 bits
    SHARED: int  # 1: every row's key and value written before any row attends, else each row alone
    ROWJOB: int  # block_rows' address
    SELF: int  # this array's
    STAGE: int  # its stage (Stage) and layer now
    LAYER: int


@fields
class Stage:
    """block_rows' stages: before W_qkv; after W_o, after gate/up, after W_down."""

    START: int
    O: int  # noqa: E741
    MLP: int
    MO: int


@fields
class LayerColumn:
    """The layer table's columns: weights' addresses (0: none), where the layer's cache is, and its
    products' calls."""

    NORM1: int  # [D]
    NORM2: int  # [D]
    QNORM: int  # [Dh]
    KNORM: int  # [Dh]
    BQKV: int  # [(H+2Hkv)*Dh]
    BO: int  # [D]
    ORDER: int  # Q/K/V's columns among the stored ones [(H+2Hkv)*Dh] int64
    SLIDING: int  # sliding?
    CACHE: int  # index in its cache
    WINDOW: int
    POST1: int  # norms of the attention's and the MLP's outputs [D] (Gemma 3)
    POST2: int
    ROPE: int  # RoPE 0 or 1
    ACT: int  # 0 SiLU, 1 tanh GELU
    CALLS: int  # then matrix m (0 Q/K/V, 1 O, 2 gate/up, 3 down), call j (0, 1): Call's fields


@fields
class Call:
    """One call of a layer's product, from LayerColumn.CALLS + (2 m + j) * len(Call) on."""

    FIRST: int  # the first job (quantizing x), or 0
    JOB: int
    ARGS: int  # its fields' address (Product)
    CHUNKS: int


CALL_WIDTH = len(Call)
LAYER_WIDTH = LayerColumn.CALLS + 4 * 2 * CALL_WIDTH  # a row of the layer table


@fields
class RowColumn:
    """The row table's columns: where a row's keys and values are (addresses, strides in elements)
    and its position."""

    KG: int  # keys of the layers that keep every position [L', Hkv, room, Dh]: address, strides
    KG_L: int
    KG_H: int
    KG_S: int
    VG: int  # their values [L', Hkv, room, Dh]
    VG_L: int
    VG_H: int
    VG_S: int
    KW: int  # the sliding layers' keys [Ls, Hkv, room', Dh], row c holding position OFF + c
    KW_L: int
    KW_H: int
    KW_S: int
    VW: int  # their values
    VW_L: int
    VW_H: int
    VW_S: int
    OFF: int
    POS: int  # the row's position
    # whether its cache keeps sliding layers apart (LayerColumn.SLIDING, CACHE), else layer l is l in KG
    SLIDES: int
    KV: int  # its cache's numbers (Attention.KV); the strides above count them (kv_numbers)


# The widths of the tables above, as plain ints (numba reads a module's ints as constants, not len() of a class)
PART_WIDTH, BLOCKS_WIDTH, ROW_WIDTH = len(PartColumn), len(Blocks), len(RowColumn)
