"""Experiments: change one forward pass and watch the answer move.

Each is a hook at a named site of the pass (engine/sites.py) that reads a value or returns a
replacement; nothing is threaded through the blocks. Numbering, as in transformers: blocks count
0..L-1; a residual-stream index counts 0 = the embeddings and i = the output of block i-1
(output_hidden_states, before the final norm).

    patch.py     activation patching: the clean run's residual (or head, or MLP output) in the corrupt run
    ablate.py    zero a head's context vector or an MLP's output: how much the answer needed it
    steer.py     add a direction (the mean residual of one text minus another's) to one block's output
    heads.py     direct logit attribution, and detectors of previous-token, first-token, induction heads
    attribute.py attribution patching (patching to first order, from one backward pass) and saliency

No I/O and no printing here; the commands in tfcli/cli/ draw the results.
"""
