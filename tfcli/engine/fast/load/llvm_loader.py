"""The kernels' other loader: llvmlite's (LLVM's MCJIT), in this process, where elf.py cannot place
the object files (not Linux on x86-64), or when TFCLI_KERNEL_LOADER=llvm asks for it (docs/kernels.md).
The only module a multiplying process imports llvmlite from, and only when it runs.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as binding

from . import elf


def place(objects: dict[str, bytes], wanted: dict[str, list[str]]) -> tuple[dict[str, int], list]:
    """Each object placed in memory by LLVM's MCJIT -> ({job: address, "pool": run's, "pool.work": work's},
    the engines, which keep them alive)."""
    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    machine = binding.Target.from_default_triple().create_target_machine()
    # numba's runtime,
    for name in {n for data in objects.values() for n in elf.undefined(data) if n.startswith(("NRT_", "numba_"))}:
        # absent: one unresolved name left LLVM
        binding.add_symbol(name, ctypes.cast(ctypes.CDLL(None).abort, ctypes.c_void_p).value)
    # resolving none of an object's names (memset at 0, a crash): they abort, as elf.py's trap stops, on paths the jobs
    # never take
    engines, addresses = [], {}
    for name, data in objects.items():  # one engine per object: the jobs define the same helpers
        engine = binding.create_mcjit_compiler(binding.parse_assembly(""), machine)
        engine.add_object_file(binding.ObjectFileRef.from_data(data))
        engine.finalize_object()
        engines.append(engine)
        found = [engine.get_function_address(s) for s in wanted[name]]
        addresses.update({name: found[0]} if name != "pool" else {"pool": found[0], "pool.work": found[1]})
    return addresses, engines
