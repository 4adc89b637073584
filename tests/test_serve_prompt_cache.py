"""The prompt cache (tfcli serve --prompt-cache): a request that starts like an earlier one reads
only what is new; usage.prompt_tokens_details.cached_tokens says how much it reused; /health shows
the store; its memory stays within the budget; answers are those computed without it."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from conftest import TINY_LLAMA
from test_serve import openai_client, post, serving

KIB = 1024


@pytest.fixture(scope="module")
def tiny():
    from tfcli.store import load

    return load(TINY_LLAMA)


def greedy(url: str, prompt, n: int = 8) -> dict:
    status, body, _ = post(url + "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert status == 200, body
    return body


def test_a_longer_prompt_reuses_the_earlier_one_and_answers_the_same(tiny):
    first = tiny.tokenizer.prompt("The cat sat on the mat and looked at the dog.")
    longer = first + tiny.tokenizer.encode(" Then it slept for a while, and")
    with serving(tiny, "tiny", prompt_cache=512 * KIB) as (url, _):
        a = greedy(url, first)
        assert a["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        b = greedy(url, longer)
        assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == len(first)
        health = json.loads(urllib.request.urlopen(url + "/health").read())
        cache = health["prompt_cache"]
        assert cache["entries"] == 2 and cache["hits"] == 1 and cache["reused_tokens"] == len(first) and cache["used_mb"] <= cache["mb"]
    with serving(tiny, "tiny") as (url, _):
        alone = greedy(url, longer)
        assert "prompt_tokens_details" not in alone["usage"]  # no prompt cache: not said
    assert b["choices"][0]["text"] == alone["choices"][0]["text"]


def test_the_store_stays_within_its_budget_under_many_different_prompts(tiny):
    budget = 64 * KIB  # about 85 positions of the tiny model (768 bytes each)
    with serving(tiny, "tiny", prompt_cache=budget) as (url, srv):
        for i in range(40):
            greedy(url, [1 + (i * 7 + j) % 250 for j in range(40)], 4)
            assert srv.batcher.prompts.used <= budget
        cache = json.loads(urllib.request.urlopen(url + "/health").read())["prompt_cache"]
        assert 1 <= cache["entries"] <= 2 and cache["used_mb"] <= cache["mb"]


def test_a_thousand_different_long_prompts_keep_the_store_within_its_budget(tiny):
    """1,000 different prompts of 60 and 72 tokens (the tiny model's context is 128), run as the engine thread
    runs them (the longest cached prefix taken, the rest through the model, the whole kept), each
    text then the text with a few tokens more: the store's bytes, counted from the arrays it holds,
    never pass the budget, and the second of each pair is served from it. (Through the server this
    takes minutes on a busy machine: benchmarks/prompt_cache.py memory measures the process.)"""
    import random

    import numpy as np

    from tfcli.engine.kvcache import KVCache
    from tfcli.engine.threads import single_threaded_blas
    from tfcli.serve.promptcache import PromptCache, cache_bytes

    budget = 96 * KIB  # 128 positions of the tiny model (768 bytes each): one pair's 72, not two
    store, rng, capacity = PromptCache(budget), random.Random(0), tiny.config.n_ctx
    most, reused = 0, 0
    with single_threaded_blas():  # tiny products on one thread: OpenBLAS's threads on a busy machine are 20x slower
        for _ in range(500):
            text = [rng.randrange(1, 300) for _ in range(60)]
            for ids in (text, text + [rng.randrange(1, 300) for _ in range(12)]):
                cache, n = store.take(ids, capacity)
                cache = KVCache(tiny.config, capacity) if cache is None else cache
                tiny.model.forward(np.asarray(ids[n:]), cache)
                store.keep(ids, cache)
                held = sum(cache_bytes(e.cache) for e in store.entries.values())
                assert held == store.used and store.used <= budget, (held, store.used)
                most, reused = max(most, held), reused + n
    assert most > budget // 2 and store.hits >= 500 and reused >= 500 * 60  # every second prompt of a pair


def test_a_chat_reuses_the_conversation_and_streams_the_count(tiny):
    from dataclasses import replace

    from tfcli.engine.chat import ChatTemplate

    short = "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}a:{% endif %}"  # the tiny context
    lm = replace(tiny, chat=ChatTemplate(short))
    with serving(lm, "tiny", prompt_cache=1024 * KIB) as (url, _):
        client = openai_client(url)
        turns = [{"role": "user", "content": "A cat?"}]
        first = client.chat.completions.create(model="tiny", messages=turns, max_tokens=6, temperature=0)
        turns += [{"role": "assistant", "content": first.choices[0].message.content}, {"role": "user", "content": "Then?"}]
        chunks = list(client.chat.completions.create(model="tiny", messages=turns, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}))
        usage = chunks[-1].usage
        assert usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens  # the whole first prompt at least


def test_the_flag_is_checked_and_shown(cli):
    from conftest import one_line_error

    one_line_error(cli("serve", "-m", TINY_LLAMA, "--prompt-cache", "-1", "--port", "0"), 2, "--prompt-cache")


@pytest.mark.slow
def test_smollm2_tenth_turn_first_token_at_most_a_third_of_the_time(smollm2_folder):
    """A chat of 1,000 tokens of history: the tenth turn's first token with the cache (the ninth
    turn's request kept) against a server without one, in the same run; greedy answers identical."""
    from tfcli.store import load

    lm = load(smollm2_folder)
    words = "The river runs past the old mill, where the miller keeps his careful records of every sack of grain. "
    turns = []
    for i in range(9):
        turns += [{"role": "user", "content": f"Question {i}: " + words * 2}, {"role": "assistant", "content": f"Answer {i}: " + words * 2}]
    ninth, tenth = turns[:-1], turns + [{"role": "user", "content": "Summarise all of that in one line."}]
    size = len(lm.tokenizer.encode(lm.chat.render(tenth, add_generation_prompt=True)))
    assert size >= 1000

    def first_token(client, messages) -> tuple[float, str]:
        t0, first, text = time.perf_counter(), None, ""
        for chunk in client.chat.completions.create(model="smollm2", messages=messages, max_tokens=16, temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                first = first or time.perf_counter() - t0
                text += chunk.choices[0].delta.content
        return first, text

    with serving(lm, "smollm2", prompt_cache=256 << 20) as (url, _):
        client = openai_client(url).with_options(timeout=900)  # 1,000 prompt tokens on a busy machine
        first_token(client, tenth[:2])  # warm
        reply = client.chat.completions.create(model="smollm2", messages=ninth, max_tokens=16, temperature=0).choices[0].message.content
        tenth = ninth + [{"role": "assistant", "content": reply}, tenth[-1]]  # as a chat client resends it
        cached, text_cached = first_token(client, tenth)
    with serving(lm, "smollm2") as (url, _):
        client = openai_client(url).with_options(timeout=900)
        first_token(client, tenth[:2])
        plain, text_plain = first_token(client, tenth)
    print(f"tenth turn ({size:,} tokens): first token {cached:.3f} s with the prompt cache, {plain:.3f} s without ({cached / plain:.2f}x)")
    assert text_cached == text_plain
    assert cached <= 0.3 * plain
