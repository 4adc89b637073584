"""Load an x86-64 ELF object file (build.py's) into executable memory: a linker's last step, small.

The kernels are compiled once per machine into object files. A process that multiplies loads them
here, with no compiler in it: each allocated section is copied into one mapped region, common
symbols get zeroed room, the relocations are applied, and the region is made read-only and
executable. A call to a function outside the object (libc's `syscall`, say) goes through a
16-byte jump placed in the region, since libc may lie farther than 2 GB from it; a symbol nothing
here resolves (numba's error paths, never taken by the jobs) points at an `ud2` trap.

Elsewhere than Linux on x86-64, kernels.py loads the same objects with llvmlite instead.
"""

from __future__ import annotations

import ctypes
import mmap
import struct
import sys

SHF_ALLOC, SHT_NOBITS, SHT_RELA, SHT_SYMTAB = 0x2, 8, 4, 2
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
R_64, R_PC32, R_PLT32, R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX, R_PC64 = 1, 2, 4, 9, 41, 42, 24


class ObjectError(Exception):
    """Not an object file this loader can place; str() is one line."""


def supported() -> bool:
    import platform

    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


class Loaded:
    """An object file placed in memory: `symbols` maps each defined name to its address. The region
    lives as long as this object does."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01" or struct.unpack_from("<HH", data, 16) != (1, 62):
            raise ObjectError("not an x86-64 ELF relocatable object")
        shoff, = struct.unpack_from("<Q", data, 0x28)
        entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
        # name, type, flags, addr, offset, size, link, info, align, entsize
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]

        def text(at: int) -> str:
            return data[at : data.index(b"\0", at)].decode()

        place, size = {}, 0  # section index -> offset in the region
        for i, s in enumerate(sections):
            if s[2] & SHF_ALLOC and s[5] and not s[1] == 0x70000001:  # not .eh_frame (unwinding is not needed)
                size = _align(size, s[8])
                place[i] = size
                size += s[5]
        symtab = next(s for s in sections if s[1] == SHT_SYMTAB)
        strings = sections[symtab[6]][4]
        symbols = [struct.unpack_from("<IBBHQQ", data, symtab[4] + 24 * k) for k in range(symtab[5] // 24)]  # name, info, other, shndx, value, size
        names = [text(strings + s[0]) for s in symbols]
        common = {}
        for k, s in enumerate(symbols):
            if s[3] == SHN_COMMON:
                size = _align(size, s[4])
                common[k] = size
                size += s[5]
        external = [k for k, s in enumerate(symbols) if s[3] == SHN_UNDEF and names[k]]
        size = _align(size, 16)
        jumps = {k: size + 16 * j for j, k in enumerate(external)}  # jmp *0(%rip); .quad address
        trap = size + 16 * len(external)
        got = trap + 16  # 8 bytes per symbol reached through the GOT
        total = _align(got + 8 * len(symbols), mmap.PAGESIZE)
        self.memory = mmap.mmap(-1, total, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.memory))
        for i, at in place.items():
            s = sections[i]
            if s[1] != SHT_NOBITS:
                self.memory[at : at + s[5]] = data[s[4] : s[4] + s[5]]
        self.memory[trap : trap + 2] = b"\x0f\x0b"
        process = ctypes.CDLL(None)

        def address(k: int) -> int:
            shndx, value = symbols[k][3], symbols[k][4]
            if shndx == SHN_UNDEF:
                try:
                    return ctypes.cast(getattr(process, names[k]), ctypes.c_void_p).value or base + trap
                except AttributeError:
                    return base + trap
            if shndx == SHN_COMMON:
                return base + common[k]
            if shndx == SHN_ABS:
                return value
            if shndx not in place:
                raise ObjectError(f"symbol {names[k]!r} is in a section that is not loaded")
            return base + place[shndx] + value

        for k, at in jumps.items():
            self.memory[at : at + 14] = b"\xff\x25\x00\x00\x00\x00" + struct.pack("<Q", address(k))
        for s in sections:
            if s[1] != SHT_RELA or s[7] not in place:
                continue
            into = place[s[7]]
            for r in range(s[5] // 24):
                offset, info, addend = struct.unpack_from("<QQq", data, s[4] + 24 * r)
                kind, k = info & 0xFFFFFFFF, info >> 32
                at = into + offset
                P = base + at
                if kind == R_64:
                    struct.pack_into("<Q", self.memory, at, (address(k) + addend) & (2**64 - 1))
                elif kind == R_PC64:
                    struct.pack_into("<q", self.memory, at, address(k) + addend - P)
                elif kind in (R_PC32, R_PLT32):
                    S = base + jumps[k] if k in jumps else address(k)
                    struct.pack_into("<i", self.memory, at, _near(S + addend - P, names[k]))
                elif kind in (R_GOTPCREL, R_GOTPCRELX, R_REX_GOTPCRELX):
                    slot = got + 8 * k
                    struct.pack_into("<Q", self.memory, slot, address(k))
                    struct.pack_into("<i", self.memory, at, _near(base + slot + addend - P, names[k]))
                else:
                    raise ObjectError(f"relocation type {kind} is not handled")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(base, total, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise ObjectError(f"memory cannot be made executable here (errno {ctypes.get_errno()})")
        self.symbols = {names[k]: address(k) for k, s in enumerate(symbols) if s[3] not in (SHN_UNDEF,) and names[k]}


def _align(n: int, alignment: int) -> int:
    alignment = max(alignment, 1)
    return (n + alignment - 1) // alignment * alignment


def _near(value: int, name: str) -> int:
    if not -(2**31) <= value < 2**31:
        raise ObjectError(f"{name!r} lies beyond a 32-bit displacement")
    return value
