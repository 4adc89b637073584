"""tfcli neurons: the activations equal a forward hook on transformers' MLP activation, a neuron's
output direction is its row of the reference's down projection, its direct logits are that row
through the reference's final norm and lm_head; the command's output and refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import TINY_GPT2, TINY_LLAMA
from test_inspect import TEXT, TOLERANCE, reference_pass, tiny_qwen2  # noqa: F401  (a fixture)

torch = pytest.importorskip("torch")


@pytest.fixture(params=["gpt2", "llama", "qwen2"])
def folder(request):
    return request.getfixturevalue("tiny_qwen2") if request.param == "qwen2" else {"gpt2": TINY_GPT2, "llama": TINY_LLAMA}[request.param]


def test_activations_direction_and_logits_equal_reference(folder):
    from tfcli.analysis import neurons as nn
    from tfcli.store import load

    lm = load(folder)
    ids = lm.tokenizer.prompt(TEXT)
    _, acts, _, ref = reference_pass(folder, ids)
    gpt2 = not hasattr(ref, "model")
    norm = ref.transformer.ln_f if gpt2 else ref.model.norm
    for layer in range(lm.config.n_layer):
        assert np.abs(nn.activations(lm.model, ids, layer) - acts[layer]).max() <= TOLERANCE
        for n in (0, 7, lm.config.d_ff - 1):
            row = nn.output_direction(lm.model, layer, n)  # [D]
            if gpt2:
                want = ref.transformer.h[layer].mlp.c_proj.weight[n].detach().numpy()  # Conv1D: [F, D]
            else:
                want = ref.model.layers[layer].mlp.down_proj.weight[:, n].detach().numpy()  # Linear: [D, F]
            assert np.abs(row - want).max() <= 1e-6
            with torch.no_grad():
                x = torch.from_numpy(np.stack([want, np.zeros_like(want)]))
                normed = norm(x)
                logits = ref.lm_head(normed[:1] - normed[1:])[0].numpy()
            assert np.abs(nn.direct_logits(lm.model, row) - logits).max() <= TOLERANCE


def test_top_neurons_are_the_largest():
    from tfcli.analysis.neurons import most_common, top_neurons

    acts = np.array([[0.1, 3.0, -5.0, 2.0], [1.0, 1.0, 0.0, 4.0]])
    ids, vals = top_neurons(acts, 2)
    assert ids.tolist() == [[1, 3], [3, 0]] and vals.tolist() == [[3.0, 2.0], [4.0, 1.0]]
    assert most_common(ids, 2) == [(3, 2), (0, 1)]


def test_json_and_text(cli):
    r = cli("neurons", "hello there", "--block", "1", "-m", TINY_LLAMA, "--json", "-k", "3")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["block"] == 1 and data["d_ff"] == 160 and len(data["tokens"][0]["neurons"]) == 3
    r = cli("neurons", "hello there", "--layer", "-1", "-m", TINY_GPT2, "--neuron", "5", "--json")
    data = json.loads(r.stdout)
    assert data["block"] == 2 and data["neuron"] == 5 and len(data["pushes_up"]) == 5
    assert data["pushes_up"][0]["logit"] >= data["pushes_up"][-1]["logit"] > data["pushes_down"][0]["logit"]
    r = cli("neurons", "hello there", "--layer", "0", "-m", TINY_GPT2)
    assert r.exit_code == 0 and "questions" in r.stdout and "\x1b[" not in r.stdout
    r = cli("neurons", "hello there", "--layer", "0", "-m", TINY_GPT2, "--neuron", "3", "--lang", "zh")
    assert r.exit_code == 0 and "推高" in r.stdout and "神经元" in r.stdout and "pushes up" not in r.stdout


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["hello", "--block", "3"], 2, "--block 3 is not a block"),
        (["hello", "--layer", "-4"], 2, "--block -4 is not a block"),
        (["hello", "--layer", "0", "--neuron", "256"], 2, "--neuron 256"),
        (["hello", "--layer", "0", "--neuron", "-1"], 2, "--neuron -1"),
        (["", "--layer", "0"], 2, "empty"),
        (["hello " * 200, "--layer", "0"], 2, "context"),
        (["hello"], 2, "--block"),
        (["hello", "--layer", "0", "-m", "nowhere/at/all"], 1, "nowhere"),
    ],
)
def test_bad_input(cli, args, code, message):
    model = [] if "-m" in args else ["-m", TINY_GPT2]
    r = cli("neurons", *args, *model)
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert message in r.stderr and r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
