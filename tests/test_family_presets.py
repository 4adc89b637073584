"""The presets of the newer families: their exact counts, worked out by hand from the published
config.json files (the sums below), and what the header says about their blocks."""

from __future__ import annotations

import json

import pytest

# Per layer: Q + K + V + O (D x H*Dh, 2 x D x Hkv*Dh, H*Dh x D) + MLP (3 D F) + norms (+ q/k norms 2 Dh).
EXACT = {
    # Qwen3-0.6B: V 151,936, D 1,024, L 28, 16 heads and 8 kv heads of 128, F 3,072, tied
    "qwen3-0.6b": 151936 * 1024 + 28 * (2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 2 * 128) + 1024,
    # Llama-3.2-1B: V 128,256, D 2,048, L 16, 32 heads and 8 kv heads of 64, F 8,192, tied
    "llama-3.2-1b": 128256 * 2048 + 16 * (2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048) + 2048,
    # Gemma-3-270M: V 262,144, D 640, L 18, 4 heads and 1 kv head of 256, F 2,048, four norms a block, tied
    "gemma-3-270m": 262144 * 640 + 18 * (2 * 640 * 1024 + 2 * 640 * 256 + 3 * 640 * 2048 + 4 * 640 + 2 * 256) + 640,
    # Phi-4-mini: V 200,064, D 3,072, L 32, 24 heads and 8 kv heads of 128, F 8,192, tied
    "phi-4-mini": 200064 * 3072 + 32 * (2 * 3072 * 3072 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072) + 3072,
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_exact_count_of_the_published_shape(cli, name):
    r = cli("params", "--preset", name, "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["exact"]["total"] == EXACT[name]
    assert abs(doc["quoted"]["relative"]) < 0.01  # within 1% of the model card's figure


def test_gemma_header_and_its_embedding_share(cli):
    r = cli("params", "--preset", "gemma-3-270m")
    assert r.exit_code == 0, r.stderr
    assert "GeGLU MLP · RMSNorm (1 + w) ×4 per block · Q/K norms" in r.stdout
    doc = json.loads(cli("params", "--preset", "gemma-3-270m", "--json").stdout)
    embedding = next(row["count"] for row in doc["exact"]["rows"] if row["key"] == "token_embedding")
    assert embedding / doc["exact"]["total"] > 0.6  # most of the model is its vocabulary
