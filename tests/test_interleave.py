"""Weight rows interleaved 8 at a time (tfcli/engine/fast/interleave.py), the layout the compiled
products of the 32-weight block types read (their results against the textbook: test_kernels.py,
which multiplies through it).

- the layout is what the module's docstring draws: each weight dequantized from a record by that
  drawing equals formats' dequantizer, bit for bit, for every type and row counts not a multiple of 8;
- restore() gives the file's bytes back, bit for bit, for any range of rows;
- the copy replaces the file's pages in resident memory (gguffile.release), and release leaves
  alone any memory that is not a GGUF file's mapping.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfcli.engine import formats
from tfcli.engine.fast.run.interleave import GROUP, TYPES, interleave, restore

gguf = pytest.importorskip("gguf")


def name(t: int) -> str:
    return formats.BLOCK_TYPES[t].name


def file_rows(t: int, n: int, nb: int, rng) -> np.ndarray:
    """[n, nb * nbytes] uint8: random blocks with finite float16 scales (and minimums)."""
    bt = formats.BLOCK_TYPES[t]
    blocks = rng.integers(0, 256, (n * nb, bt.nbytes), dtype=np.uint8)
    for at in ([0, 2] if t in (3, 7) else [0]):
        blocks[:, at : at + 2] = rng.uniform(-0.1, 0.1, (len(blocks), 1)).astype(np.float16).view(np.uint8)
    return blocks.reshape(n, -1)


def weights_by_the_drawing(groups: np.ndarray, t: int, n: int, nb: int) -> np.ndarray:
    """[n, 32 nb] float32, read from the records as the docstring draws them, by plain loops."""
    nbytes = formats.BLOCK_TYPES[t].nbytes
    out = np.empty((n, 32 * nb), np.float32)
    for r in range(n):
        g, lane = divmod(r, GROUP)
        for b in range(nb):
            rec = groups[g, b * 8 * nbytes : (b + 1) * 8 * nbytes]
            d = rec[2 * lane : 2 * lane + 2].view(np.float16)[0].astype(np.float32)
            at = 16
            m = None
            if t in (3, 7):
                m = rec[at + 2 * lane : at + 2 * lane + 2].view(np.float16)[0].astype(np.float32)
                at += 16
            hb = None
            if t in (6, 7):
                hb = rec[at : at + 32].view("<u4")  # [8]: dword j, bit 4 lane + i
                at += 32
            for k in range(32):
                j, i = divmod(k, 4)
                if t == 8:
                    q = int(rec[at + 32 * j + 4 * lane + i].astype(np.int8))
                else:
                    byte = rec[at + 32 * (j % 4) + 4 * lane + i]
                    q = int(byte & 15) if j < 4 else int(byte >> 4)
                    if hb is not None:
                        q |= ((int(hb[j]) >> (4 * lane + i)) & 1) << 4
                    q -= {2: 8, 6: 16}.get(t, 0)
                w = np.float32(q) * d
                out[r, 32 * b + k] = w + m if m is not None else w
    return out


@pytest.mark.parametrize("t", TYPES, ids=name)
def test_the_layout_is_the_drawing(t):
    rng = np.random.default_rng(t)
    n, nb = 13, 3  # a group and a part of one
    rows = file_rows(t, n, nb, rng)
    packed = interleave(rows, t)
    assert packed.groups.shape == (2, nb * 8 * formats.BLOCK_TYPES[t].nbytes) and packed.rows == n
    want = formats.dequantize(rows, t, (n, 32 * nb))
    np.testing.assert_array_equal(weights_by_the_drawing(packed.groups, t, n, nb), want)


@pytest.mark.parametrize("t", TYPES, ids=name)
def test_restore_gives_the_files_bytes_back(t):
    rng = np.random.default_rng(10 + t)
    for n in (8, 21, 4096 + 19):  # the last: more than one tile of interleave's
        rows = file_rows(t, n, 2, rng)
        packed = interleave(rows, t)
        np.testing.assert_array_equal(restore(packed, 0, n), rows)
        for a, b in ((3, 7), (3, min(n, 11)), (0, 8), (n - 5, n)):
            np.testing.assert_array_equal(restore(packed, a, b), rows[a:b])


def _rss_file() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads /proc/self/status (Linux)")
def test_the_copy_replaces_the_files_pages_in_memory(tmp_path):
    """Interleaving a 40 MB Q8_0 tensor read through the file's mapping, with gguffile.release, leaves
    the process holding the copy alone: the file's pages it touched are dropped as it goes."""
    from tfcli.engine.gguffile import GGUFFile, release

    rng = np.random.default_rng(0)
    n, nb = 4096, 288  # 4096 rows of 9216 weights: 40 MB of Q8_0
    rows = file_rows(8, n, nb, rng)
    w = gguf.GGUFWriter(str(tmp_path / "q8.gguf"), "llama")
    w.add_tensor("w", rows, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    f = GGUFFile(tmp_path / "q8.gguf")
    view = f.raw("w").reshape(n, -1)
    before = _rss_file()
    kept = interleave(view, 8)  # no release: the file's pages stay
    held = _rss_file() - before
    assert held > 0.9 * view.nbytes, held
    release(view)
    assert _rss_file() - before < 0.1 * view.nbytes
    packed = interleave(view, 8, release=release)
    assert _rss_file() - before < 0.1 * view.nbytes, "the pages were not dropped as the tiles were copied"
    np.testing.assert_array_equal(packed.groups, kept.groups)
    np.testing.assert_array_equal(restore(packed, 100, 120), rows[100:120])  # the view still reads: the pages come back


def test_release_leaves_other_memory_alone():
    """An array of the process's own memory, or of bytes, keeps its values (MADV_DONTNEED would zero it)."""
    from tfcli.engine.gguffile import release

    own = np.arange(1 << 20, dtype=np.uint8)
    release(own[4096:])
    assert (own == np.arange(1 << 20, dtype=np.uint8)).all()
    frozen = np.frombuffer(bytes(range(256)) * 64, np.uint8)
    release(frozen)
    assert (frozen[:256] == np.arange(256)).all()
