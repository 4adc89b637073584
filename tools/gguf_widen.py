"""Write a GGUF file's tensors widened to F32, everything else as it was (for benchmarks/quant.py:
llama.cpp on the float32 weights that a tfcli folder converted from the same file holds).

    python tools/gguf_widen.py SmolLM2-135M-Instruct.Q4_1.gguf SmolLM2-135M-Instruct.F32.gguf

Uses gguf-py (a test dependency), which reads and dequantizes every type llama.cpp writes.
"""

from __future__ import annotations

import sys

import gguf
import numpy as np


def widen(src: str, dst: str) -> None:
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # the header's own fields, and what the writer writes itself
        if name == "general.file_type":
            w.add_uint32(name, int(gguf.LlamaFileType.ALL_F32))
            continue
        value_type = field.types[0]
        if value_type == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), value_type)
    for t in r.tensors:
        data = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape(tuple(reversed([int(n) for n in t.shape]))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    widen(sys.argv[1], sys.argv[2])
