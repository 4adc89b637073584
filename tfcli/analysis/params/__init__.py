"""Where a transformer's parameters live, what one token costs, and how much memory it all takes.

Two conventions, computed from the same shape (a tfcli.engine.config.ModelConfig, the one
description of a shape the engine also runs on):

* the 3Blue1Brown tally (Deep Learning series, chapters 5-7): weight matrices only, counted per head
  and per layer, with the embedding and the unembedding as two matrices. For GPT-3 it gives the
  well-known 175,181,291,520.
* the exact count: every tensor a checkpoint stores (biases, norms, learned positions), with a tied
  unembedding counted once because it *is* the embedding matrix. For GPT-3: 174,604,259,328.

    shape.py    a shape from flags: validation, what follows from what (head_dim = D / H ...)
    factors.py  a count as a product of named factors, which also writes its formula and numbers
    tally.py    the 3Blue1Brown tally, the exact count, and why the two differ
    costs.py    FLOPs per token, weights in memory, the KV cache, the attention pattern
    census.py   the tensors of a real weight file, grouped like the exact count (for --from)
    presets.py  the shapes of published models, with the figure their authors quoted
    labels.py   the name of every row, in English and Chinese

Pure Python on ints: no NumPy, no files, no printing (so `tfcli params --preset` starts fast); only
census.py imports the engine's families (for their name tables), and only --from needs it.
Axes as in STYLE.md: L layers, D width, H/Hkv heads, Dh head size, F MLP width, V vocabulary,
T context. This file imports nothing, so that importing one module never loads the others.
"""
