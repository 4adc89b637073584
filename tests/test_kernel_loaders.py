"""The two loaders of the compiled kernels' object files.

- engine/fast/elf.py, the default on Linux x86-64: places an object in memory and refuses at load,
  naming it, what it cannot place (a symbol nothing in the process defines, a relocation type it
  does not apply, a section cut short). Its objects here are made by hand with llvmlite.
- llvmlite's own loader (kernels._place_with_llvm), what other platforms run, asked for with
  TFCLI_KERNEL_LOADER=llvm (docs/kernels.md): a process of its own loads the suite's kernels that
  way and gives the ELF loader's results bit for bit.
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys

import numpy as np
import pytest

from tfcli.engine.fast.load import elf

TRIPLE = "x86_64-unknown-linux-gnu"

GOOD = """
@base = global i64 40
declare i64 @labs(i64)
define i64 @answer(i64 %x) {
  %b = load i64, i64* @base
  %a = call i64 @labs(i64 %x)
  %s = add i64 %a, %b
  ret i64 %s
}
"""


def _object(ir: str, reloc: str = "pic") -> bytes:
    """An x86-64 ELF relocatable object compiled from LLVM IR."""
    binding = pytest.importorskip("llvmlite.binding")
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    machine = binding.Target.from_triple(TRIPLE).create_target_machine(reloc=reloc, codemodel="small")
    module = binding.parse_assembly(f'target triple = "{TRIPLE}"\n' + ir)
    module.verify()
    return machine.emit_object(module)


@pytest.fixture(autouse=True)
def elf_here(request):
    if "llvm_loader" not in request.node.name and not elf.supported():
        pytest.skip("the ELF loader runs on Linux x86-64 only")


def _call(placed: elf.Loaded, name: str, *args: int) -> int:
    return ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_int64] * len(args))(placed.symbols[name])(*args)


def test_an_object_is_placed_and_runs():
    """A function reading a global and calling libc (through the jump placed beside it): -7 -> |-7| + 40."""
    placed = elf.Loaded(_object(GOOD))
    assert _call(placed, "answer", -7) == 47


def test_an_unresolved_symbol_is_refused_at_load_by_name():
    """A call to a function nothing in the process defines is refused when the object is loaded,
    naming the function, instead of a trap that would fire when the call is made."""
    ir = GOOD.replace("@labs", "@tfcli_nowhere_to_be_found")
    with pytest.raises(elf.ObjectError, match="unresolved symbol: tfcli_nowhere_to_be_found") as e:
        elf.Loaded(_object(ir))
    assert "\n" not in str(e.value)
    placed = elf.Loaded(_object(ir), may_trap=("tfcli_nowhere",))  # named by the caller: it may stay a trap
    assert "answer" in placed.symbols


def test_an_unsupported_relocation_is_refused_at_load_by_name():
    """A thread-local variable needs R_X86_64_TPOFF32, which the loader does not apply."""
    ir = """
@counter = thread_local(localexec) global i64 0
define i64 @bump() {
  %v = load i64, i64* @counter
  %w = add i64 %v, 1
  store i64 %w, i64* @counter
  ret i64 %w
}
"""
    with pytest.raises(elf.ObjectError, match=r"relocation R_X86_64_TPOFF32 against 'counter' is not supported"):
        elf.Loaded(_object(ir, reloc="static"))


def _sections(data: bytes) -> dict[str, tuple[int, int]]:
    """Each section's name -> (where its header is in the file, its offset)."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names = headers[names_at][4]
    return {data[names + h[0] : data.index(b"\0", names + h[0])].decode(): (shoff + i * entsize, h[4]) for i, h in enumerate(headers)}


def test_a_truncated_object_is_refused_at_load():
    """An object cut short (its section headers past the end), or a section whose bytes run past the
    end of the file, is refused naming what is missing; nothing is placed."""
    data = _object(GOOD)
    with pytest.raises(elf.ObjectError, match="section headers run past the end of the file"):
        elf.Loaded(data[: len(data) - 100])
    header, offset = _sections(data)[".text"]
    cut = bytearray(data)
    struct.pack_into("<Q", cut, header + 32, len(data))  # .text's size: from its offset to past the end
    with pytest.raises(elf.ObjectError, match=r"section \.text ends at byte [\d,]+ of a [\d,]+-byte file: it is cut short"):
        elf.Loaded(bytes(cut))
    with pytest.raises(elf.ObjectError, match="not an x86-64 ELF relocatable object"):
        elf.Loaded(data[:40])


# --- llvmlite's loader ------------------------------------------------------------------------------


def test_the_llvm_loader_gives_the_elf_loaders_results(kernels, tmp_path, monkeypatch):
    """TFCLI_KERNEL_LOADER=llvm: a process of its own loads the same kernels with llvmlite and runs
    products of every block type (1 and 5 rows), a dequantization and a decode step's attention;
    each result is this process's (the ELF loader's, on Linux x86-64) bit for bit."""
    from test_kernels import FLOATS, QUANTIZED, _env, random_rows, row_length

    rng = np.random.default_rng(900)
    want = {}
    for t in QUANTIZED + FLOATS:
        n, k = 24, row_length(t, 2)
        rows, x = random_rows(t, n, k, rng), rng.standard_normal((5, k)).astype(np.float32)
        np.save(tmp_path / f"rows{t}.npy", rows), np.save(tmp_path / f"x{t}.npy", x)
        for T in (1, 5):
            out = np.empty((T, n), np.float32)
            kernels.product(np.ascontiguousarray(x[:T]), rows, t, out, 0, n)
            want[f"product{t}-{T}"] = out
    rows = random_rows(12, 8, 256, rng)
    np.save(tmp_path / "rows-dq.npy", rows)
    want["dequantize"] = np.empty((8, 256), np.float32)
    kernels.dequantize_rows(rows, 12, want["dequantize"], 0, 8)
    q, keys, values = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 1, 64), (2, 64, 40), (2, 40, 64)))
    for a, at in ((q, "q"), (keys, "k"), (values, "v")):
        np.save(tmp_path / f"{at}.npy", a)
    want["attention"] = kernels.attention(q, keys, values)
    code = (
        "import sys, numpy as np\n"
        "from tfcli.engine.fast.load import kernels\n"
        "kernels.load()\n"
        "assert all(type(e).__module__.startswith('llvmlite') for e in kernels._k['keep']), 'not llvmlite'\n"
        f"folder = {str(tmp_path)!r}\n"
        f"for t in {QUANTIZED + FLOATS!r}:\n"
        "    rows, x = np.load(f'{folder}/rows{t}.npy'), np.load(f'{folder}/x{t}.npy')\n"
        "    for T in (1, 5):\n"
        "        out = np.empty((T, len(rows)), np.float32)\n"
        "        kernels.product(np.ascontiguousarray(x[:T]), rows, t, out, 0, len(rows))\n"
        "        np.save(f'{folder}/got-product{t}-{T}.npy', out)\n"
        "rows = np.load(f'{folder}/rows-dq.npy')\n"
        "out = np.empty((8, 256), np.float32)\n"
        "kernels.dequantize_rows(rows, 12, out, 0, 8)\n"
        "np.save(f'{folder}/got-dequantize.npy', out)\n"
        "q, k, v = (np.load(f'{folder}/{a}.npy') for a in 'qkv')\n"
        "np.save(f'{folder}/got-attention.npy', kernels.attention(q, k, v))\n"
    )
    env = dict(_env(kernels), TFCLI_KERNEL_LOADER="llvm")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for key, out in want.items():
        assert np.array_equal(np.load(tmp_path / f"got-{key}.npy"), out, equal_nan=True), key
