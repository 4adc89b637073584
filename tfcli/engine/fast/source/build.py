"""Compile the kernels (jobs.py, attention_job.py, block_job.py) and the pool (pool.py) to machine code for this CPU,
once per
machine, into object files that kernels.py loads without numba or LLVM (elf.py).

    python -c "from pathlib import Path; from tfcli.engine.fast.source.build import build; build(Path(FOLDER))"

Runs in a process of its own (kernels._build starts it; a failure's last line of stderr is the
reason), so that the process that multiplies never imports numba: numba and LLVM cost about 130 MB
of memory once they have compiled anything, more than SmolLM2's whole file.
Writes FOLDER/<job>.o, FOLDER/pool.o and FOLDER/index.json (each job's symbol, the pool's, each file's
sha256), then FOLDER/ready.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _target_machine():
    import llvmlite.binding as binding

    binding.initialize_native_target()
    binding.initialize_native_asmprinter()
    target = binding.Target.from_default_triple()
    cpu, features = binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()
    return binding, target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel="small")


def build(folder: Path) -> None:
    import platform

    import numba
    from numba import types

    from . import attention_job, block_job, jobs, pool
    from ..load.compiled import marker

    binding, machine = _target_machine()
    # each module's helpers compiled in its own namespace, where its jobs find them
    for module in (jobs, attention_job, block_job):
        vars(module).update(
            {
                name: numba.njit(nogil=True, inline="always", error_model="numpy")(getattr(module, name))
                for name in module.HELPERS
            }
        )
    jobs._dot_rows = numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})(jobs._dot_rows)
    vars(jobs).update(
        {name: numba.njit(nogil=True, error_model="numpy")(getattr(jobs, name)) for name in jobs.ROWS_OF_X}
    )
    signature = types.void(types.CPointer(types.int64), types.int64)
    symbols, digests = {}, {}
    for module, name in [
        (module, name) for module in (jobs, attention_job, block_job) for name in module.JOBS
    ]:
        # sums in vector lanes, multiply-adds fused
        fast = {"fastmath": {"reassoc", "contract"}} if name == "attention" else {}
        compiled = numba.njit([signature], nogil=True, error_model="numpy", **fast)(getattr(module, name)).overloads[
            signature.args
        ]
        code = machine.emit_object(binding.parse_assembly(compiled.library.get_llvm_str()))
        (folder / f"{name}.o").write_bytes(code)
        symbols[name], digests[name] = compiled.fndesc.mangled_name, hashlib.sha256(code).hexdigest()
    futex = pool.futex_number()
    ir = pool.source(x86=platform.machine().lower() in ("x86_64", "amd64"), futex=futex or 0)
    code = machine.emit_object(binding.parse_assembly(ir))
    (folder / "pool.o").write_bytes(code)
    digests["pool"] = hashlib.sha256(code).hexdigest()
    index = {
        "jobs": symbols, "pool": {"run": "tfcli_run", "work": "tfcli_work", "threads": futex is not None},
        "sha256": digests,
    }
    (folder / "index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    # last: the folder is complete
    (folder / "ready").write_text(f"{marker()}numba {numba.__version__}\n", encoding="utf-8")
