"""Load an x86-64 ELF object file (build.py's) into executable memory: a linker's last step, small.

The kernels are compiled once per machine into object files. A process that multiplies loads them
here, with no compiler in it: each allocated section is copied into one mapped region, common
symbols get zeroed room, the relocations are applied, and the region is made read-only and
executable. A call to a function outside the object (libc's `syscall`, say) goes through a
16-byte jump placed in the region, since libc may lie farther than 2 GB from it.

What it cannot place it refuses at load, naming it (ObjectError): a section cut short, a
relocation type it does not apply, a symbol that nothing in the process defines. The caller may
name the symbols that may stay unresolved (numba's runtime, reached only from error paths the
jobs never take: kernels.py): those point at an `ud2` trap.

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
HANDLED = {R_64: "R_X86_64_64", R_PC32: "R_X86_64_PC32", R_PLT32: "R_X86_64_PLT32", R_GOTPCREL: "R_X86_64_GOTPCREL",
           R_GOTPCRELX: "R_X86_64_GOTPCRELX", R_REX_GOTPCRELX: "R_X86_64_REX_GOTPCRELX", R_PC64: "R_X86_64_PC64"}  # fmt: skip
OTHERS = {10: "R_X86_64_32", 11: "R_X86_64_32S", 16: "R_X86_64_DTPMOD64", 17: "R_X86_64_DTPOFF64", 18: "R_X86_64_TPOFF64",
          19: "R_X86_64_TLSGD", 20: "R_X86_64_TLSLD", 21: "R_X86_64_DTPOFF32", 22: "R_X86_64_GOTTPOFF", 23: "R_X86_64_TPOFF32",
          26: "R_X86_64_GOTPC32"}  # the System V x86-64 ABI's names, for the message  # fmt: skip


class ObjectError(Exception):
    """Not an object file this loader can place; str() is one line."""


def supported() -> bool:
    import platform

    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


class Loaded:
    """An object file placed in memory: `symbols` maps each defined name to its address. The region
    lives as long as this object does. `may_trap`: prefixes of the names that may stay unresolved
    (calling one stops the process at an `ud2`); any other unresolved name is refused."""

    def __init__(self, data: bytes, may_trap: tuple[str, ...] = ()) -> None:
        if len(data) < 64 or data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01" or struct.unpack_from("<HH", data, 16) != (1, 62):  # fmt: skip
            raise ObjectError("not an x86-64 ELF relocatable object")
        shoff, = struct.unpack_from("<Q", data, 0x28)
        entsize, count, names_at = struct.unpack_from("<HHH", data, 0x3A)
        if entsize < 64 or shoff + count * entsize > len(data) or names_at >= count:
            raise ObjectError(f"the section headers run past the end of the file ({len(data):,} bytes): it is cut short")
        # name, type, flags, addr, offset, size, link, info, align, entsize
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]

        def text(at: int) -> str:
            end = data.find(b"\0", at)
            if at >= len(data) or end < 0:
                raise ObjectError(f"a name at byte {at:,} runs past the end of the file: it is cut short")
            return data[at:end].decode(errors="replace")

        for s in sections:  # every section read or copied lies inside the file
            if s[1] != SHT_NOBITS and s[1] != 0 and s[4] + s[5] > len(data):
                shstr = sections[names_at]
                where = text(shstr[4] + s[0]) if shstr[4] + shstr[5] <= len(data) else "?"
                raise ObjectError(f"section {where} ends at byte {s[4] + s[5]:,} of a {len(data):,}-byte file: it is cut short")

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
        process = ctypes.CDLL(None)
        found = {k: _defined(process, names[k]) for k in external}
        missing = sorted({names[k] for k, at in found.items() if at is None and not (may_trap and names[k].startswith(may_trap))})
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            raise ObjectError(f"unresolved symbol{'s' if len(missing) > 1 else ''}: {shown} (nothing in this process defines it)")
        relocations = []  # (the section they apply to, its RELA section)
        for s in sections:
            if s[1] == SHT_RELA and s[7] in place:
                relocations.append((s[7], s))
                for r in range(s[5] // 24):
                    info, = struct.unpack_from("<Q", data, s[4] + 24 * r + 8)
                    kind, k = info & 0xFFFFFFFF, info >> 32
                    if kind not in HANDLED:
                        what, against = OTHERS.get(kind, f"type {kind}"), names[k] if k < len(names) and names[k] else "a section"
                        raise ObjectError(f"relocation {what} against {against!r} is not supported")
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

        def address(k: int) -> int:
            shndx, value = symbols[k][3], symbols[k][4]
            if shndx == SHN_UNDEF:
                return found.get(k) or base + trap  # an unresolved name may_trap allowed
            if shndx == SHN_COMMON:
                return base + common[k]
            if shndx == SHN_ABS:
                return value
            if shndx not in place:
                raise ObjectError(f"symbol {names[k]!r} is in a section that is not loaded")
            return base + place[shndx] + value

        for k, at in jumps.items():
            self.memory[at : at + 14] = b"\xff\x25\x00\x00\x00\x00" + struct.pack("<Q", address(k))
        for target, s in relocations:
            into = place[target]
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
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(base, total, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
            raise ObjectError(f"memory cannot be made executable here (errno {ctypes.get_errno()})")
        self.symbols = {names[k]: address(k) for k, s in enumerate(symbols) if s[3] not in (SHN_UNDEF,) and names[k]}


def undefined(data: bytes) -> list[str]:
    """The names a 64-bit little-endian ELF object uses and does not define (any machine); [] for
    another format. What another loader must resolve (kernels.py's llvmlite one)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    entsize, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    names = []
    for symtab in (s for s in sections if s[1] == SHT_SYMTAB):
        strings = sections[symtab[6]][4]
        for k in range(symtab[5] // 24):
            name, _, _, shndx = struct.unpack_from("<IBBH", data, symtab[4] + 24 * k)
            if shndx == SHN_UNDEF and name:
                names.append(data[strings + name : data.index(b"\0", strings + name)].decode(errors="replace"))
    return names


def _defined(process: ctypes.CDLL, name: str) -> int | None:
    """The address of `name` in this process (libc, libm, Python's own symbols), or None."""
    try:
        return ctypes.cast(getattr(process, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _align(n: int, alignment: int) -> int:
    alignment = max(alignment, 1)
    return (n + alignment - 1) // alignment * alignment


def _near(value: int, name: str) -> int:
    if not -(2**31) <= value < 2**31:
        raise ObjectError(f"{name!r} lies beyond a 32-bit displacement")
    return value
