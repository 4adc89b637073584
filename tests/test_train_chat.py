"""Chat JSONL training (engine/train/chat.py): conversations laid out by the model's chat template,
the loss on the assistant's turns only. The mask is checked on a hand-made template and on
SmolLM2's real one, the masked loss and its gradients against torch's ignore_index, and the
command end to end, with one-line errors for a line that is not a conversation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_LLAMA, one_line_error

from tfcli.engine.chat import ChatTemplate, load_chat_template
from tfcli.engine.grad import IGNORED
from tfcli.engine.train import TrainError
from tfcli.engine.train.chat import ChatData, conversations, encode
from tfcli.engine.train.data import folder_tokenizer

TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")  # fmt: skip
TALK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "And?"},
        {"role": "assistant", "content": "Bye."}]  # fmt: skip
SMOLLM2 = Path.home() / ".cache" / "tfcli" / "models" / "smollm2"


def scored_text(tok, ids, mask) -> list[str]:
    """The scored tokens, decoded, one string per run of consecutive scored tokens."""
    runs, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(int(t))
        elif cur:
            runs, cur = runs + [tok.decode(cur)], []
    return runs + ([tok.decode(cur)] if cur else [])


def test_only_the_assistant_turns_are_scored_with_a_hand_made_template():
    tok = folder_tokenizer(TINY_LLAMA)
    ids, mask = encode(ChatTemplate(TEMPLATE), tok, TALK)
    text = ChatTemplate(TEMPLATE).render(TALK, add_generation_prompt=False)
    assert tok.decode(ids) == text
    assert scored_text(tok, ids, mask) == ["Hello.</s>\n", "Bye.</s>\n"]


@pytest.mark.skipif(not (SMOLLM2 / "tokenizer.json").is_file(), reason="tfcli pull smollm2 first")
def test_only_the_assistant_turns_are_scored_with_smollm2s_template():
    """SmolLM2's template (ChatML): each answer and its <|im_end|> and newline, nothing of the
    system prompt, the user's turns or the `<|im_start|>assistant` header."""
    tok, template = folder_tokenizer(SMOLLM2), load_chat_template(SMOLLM2)
    ids, mask = encode(template, tok, TALK)
    assert scored_text(tok, ids, mask) == ["Hello.<|im_end|>\n", "Bye.<|im_end|>\n"]
    transformers = pytest.importorskip("transformers")
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(SMOLLM2 / "tokenizer.json"))
    ref.chat_template = template.source
    assert list(ids) == list(ref.apply_chat_template(TALK, tokenize=True, return_dict=True)["input_ids"])


def test_targets_outside_the_assistant_turns_are_ignored():
    tok = folder_tokenizer(TINY_LLAMA)
    line = json.dumps({"messages": TALK})
    data = ChatData.of(line + "\n" + line, Path("c.jsonl"), ChatTemplate(TEMPLATE), tok, 200, 0.5, pad=2)
    assert data.n_train == 1 and data.train_tokens == data.val_tokens > 0
    x, y = data.batch(0, 1, "random", 0)  # [1, 200]
    ids, mask = encode(ChatTemplate(TEMPLATE), tok, TALK)
    n = len(ids)
    assert list(x[0, : n - 1]) == list(ids[:-1]) and (x[0, n:] == 2).all()  # padded after the end
    assert list(y[0, : n - 1][mask[1:]]) == list(ids[1:][mask[1:]])
    assert (y[0, : n - 1][~mask[1:]] == IGNORED).all() and (y[0, n - 1 :] == IGNORED).all()


def test_the_masked_loss_and_its_gradients_equal_torch_ignore_index():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_train_grads import V, random_model, torch_grads

    from tfcli.engine.train import trainable
    from tfcli.engine.train.folder import load_params

    model = random_model("llama", tied=False)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        cfg, _, params = load_params(Path(folder))
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, V, (2, 12)), rng.integers(0, V, (2, 12))
    y[0, :5] = IGNORED
    y[1, 7:] = IGNORED
    loss, grads = trainable(cfg, params).loss_and_grads(x, y)
    ref_loss, ref = torch_grads(model, x, y)  # cross_entropy ignores -100 by default
    assert IGNORED == -100 and abs(loss - ref_loss) <= 1e-5 * ref_loss
    assert abs(trainable(cfg, params).loss(x, y) - ref_loss) <= 1e-5 * ref_loss
    for name, g in grads.items():
        assert np.linalg.norm(g - ref[name]) <= 1e-4 * np.linalg.norm(ref[name]), name
    assert torch is not None


@pytest.mark.parametrize("line, what", [
    ("not json", "not JSON"),
    ('{"text": "hello"}', 'no list of "messages"'),
    ('{"messages": [{"role": "user", "content": "Hi"}]}', "no assistant turn"),
    ('{"messages": [{"role": "robot", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}', "a message is"),
    ('{"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "Yo"}]}', "a message is"),
])  # fmt: skip
def test_a_line_that_is_not_a_conversation_is_named(line, what):
    good = json.dumps({"messages": TALK})
    with pytest.raises(TrainError, match=f"line 3 of c.jsonl is not a conversation: .*{what}"):
        conversations(f"{good}\n\n{line}\n{good}\n", Path("c.jsonl"))


@pytest.fixture
def chat_model(tmp_path):
    folder = tmp_path / "chatty"
    shutil.copytree(TINY_LLAMA, folder)
    (folder / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    return folder


def test_a_chat_run_cut_short_and_resumed_ends_on_the_same_adapter(cli, chat_model, tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    from conftest import interrupt_call
    from tfcli.engine.train.run import Run

    path = tmp_path / "talk.jsonl"
    lines = [json.dumps({"messages": [{"role": "user", "content": f"What is {i} + 1?"},
                                      {"role": "assistant", "content": f"It is {i + 1}."}]}) for i in range(20)]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["--from", chat_model, "--lora", "2", "--seq-len", "48", "--batch-size", "2", "--eval-every", "2",
            "--steps", "4", "--json", "--threads", "1"]  # fmt: skip  (one thread: the default takes the
    # cores idle at the time, and the resume below must take the run's own count, whatever is idle then)
    whole = cli("train", path, "-o", tmp_path / "whole", *args)
    assert whole.exit_code == 0, (whole.stderr, whole.exception)
    first = json.loads(whole.stdout)
    assert np.isfinite(first["train_loss"]) and np.isfinite(first["val_loss"])
    assert "training tokens" in whole.stderr
    real = Run.train_step
    interrupt_call(monkeypatch, Run, "train_step", 3)  # Ctrl-C after 2 steps
    r = cli("train", path, "-o", tmp_path / "cut", *args)
    assert r.exit_code == 130, r.stderr
    monkeypatch.setattr(Run, "train_step", real)
    r = cli("train", path, "-o", tmp_path / "cut", "--resume", "--json")  # no --threads: the run's own
    assert r.exit_code == 0, (r.stderr, r.exception)
    assert "resumes on" not in r.stderr, r.stderr  # (a busy machine may add that the run's 1 thread is kept)
    assert json.loads((tmp_path / "cut" / "trainer_state.json").read_text())["threads"] == 1
    a, b = (load_file(str(tmp_path / d / "adapter_model.safetensors")) for d in ("whole", "cut"))
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)



def test_chat_data_errors_are_one_line(cli, chat_model, tmp_path):
    path = tmp_path / "talk.jsonl"
    path.write_text(json.dumps({"messages": TALK}) + "\n" + '{"prompt": "x"}\n', encoding="utf-8")
    common = ["--seq-len", "32", "--batch-size", "1", "--steps", "1"]
    one_line_error(cli("train", path, "-o", tmp_path / "a", "--from", chat_model, *common), 1,
                   "line 2 of", "is not a conversation")  # fmt: skip
    path.write_text(json.dumps({"messages": TALK}) + "\n", encoding="utf-8")
    r = cli("train", path, "-o", tmp_path / "b", "--from", TINY_LLAMA, *common)
    one_line_error(r, 1, "has no chat template")
    long = [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "ok"}]
    path.write_text(json.dumps({"messages": long}) + "\n", encoding="utf-8")
    one_line_error(cli("train", path, "-o", tmp_path / "c", "--from", chat_model, *common), 1, "past --seq-len")
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
