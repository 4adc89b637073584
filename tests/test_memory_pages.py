"""What a GGUF file run in place keeps resident: the pages its reads map are dropped once their bytes
are copied, so a model costs its file's size once (the kernels' interleaved copy), not twice.

Linux maps cached pages around each page a read of a mapping touches (64 KB, or the large folio of
up to 2 MB the page lies in),
and they stay resident until unmapped or dropped: an embedding lookup of 512 tokens left most of the
token matrix resident beside the interleaved copy the tied output head reads. These tests count the
pages of the mapping present in this process's page table (/proc/self/pagemap's present bit).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from tfcli.engine.gguf_weights import MappedPart  # noqa: E402
from tfcli.engine.gguffile import FAULT_AROUND, GGUFFile, release  # noqa: E402
from tfcli.engine.quantized import Part, Quantized  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="reads /proc/self/pagemap (Linux)")

PAGE = 4096
Q8_0 = 8
N, NB = 16384, 18  # 16384 rows of 576 weights (SmolLM2's width): 10 MB of Q8_0


def present(lo: int, hi: int) -> int:
    """Pages of this process's address range lo..hi mapped and resident."""
    first, last = lo // PAGE, -(-hi // PAGE)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(first * 8)
        entries = np.frombuffer(f.read((last - first) * 8), "<u8")
    return int((entries >> np.uint64(63)).sum())


@pytest.fixture
def matrix(tmp_path):
    """A GGUF of a Q8_0 matrix between two others, its rows as the file holds them, and the view of them."""
    rng = np.random.default_rng(0)
    scales = rng.uniform(0.01, 0.02, (N, NB, 1)).astype(np.float16).view(np.uint8)  # [N, NB, 2]
    rows = np.concatenate([scales, rng.integers(0, 256, (N, NB, 32), dtype=np.uint8)], axis=2)  # [N, NB, 34]
    rows = rows.reshape(N, NB * 34)
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    for name in ("before", "token_embd", "after"):
        w.add_tensor(name, rows, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    f = GGUFFile(tmp_path / "m.gguf")
    with open(tmp_path / "m.gguf", "rb", buffering=0) as file:
        yield f, rows, f.raw("token_embd").reshape(N, -1), (file, f.tensors["token_embd"].start)
    f.close()


def span(view: np.ndarray, around: int = 0) -> tuple[int, int]:
    return view.ctypes.data - around, view.ctypes.data + view.nbytes + around


def test_a_lookup_leaves_no_pages_of_the_matrix_behind(matrix):
    """512 tokens looked up read the right rows and leave nothing of the 10 MB mapped: read through
    the mapping, the pages mapped around them held all of it."""
    f, rows, view, read = matrix
    ids = np.random.default_rng(1).integers(0, N, 512)  # [512]
    bare = Quantized((Part(Q8_0, view),), NB * 32)
    got = bare.rows(ids)  # the plain Part: the pages stay
    assert present(*span(view)) * PAGE > 0.9 * view.nbytes, "the fault-around this test measures did not happen"
    release(view, FAULT_AROUND)
    assert present(*span(view, FAULT_AROUND)) == 0
    mapped = Quantized((MappedPart(Q8_0, view, None, *read),), NB * 32)
    np.testing.assert_array_equal(mapped.rows(ids), got)  # [512, 576]: the same values
    np.testing.assert_array_equal(mapped[ids[:3]], Part(Q8_0, rows).dequantize(ids[:3], NB * 32))
    assert present(*span(view, FAULT_AROUND)) == 0, "a lookup's pages stayed resident"
    for i in (5, N // 2, N - 1):  # a decode step's one token
        mapped.rows(np.array([i]))
        assert present(*span(view, FAULT_AROUND)) == 0


def test_interleaving_holds_the_copy_alone(matrix):
    """The kernels' interleaved copy of a matrix read through the mapping leaves none of the file's
    pages resident, neither its own nor those its reads mapped in the tensors beside it."""
    from tfcli.engine.fast.run import kernel_products
    from tfcli.engine.fast.run.interleave import restore

    f, rows, view, read = matrix
    part = MappedPart(Q8_0, view, None, *read)
    packed = kernel_products.rows_of(part)
    assert packed.nbytes >= view.nbytes
    assert present(*span(view, FAULT_AROUND)) == 0, "the file's pages stayed beside the copy"
    np.testing.assert_array_equal(restore(packed, 100, 164), rows[100:164])
