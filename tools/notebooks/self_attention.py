"""examples/self-attention(.zh).ipynb: the Chinese note on self-attention, step by step, on the shipped tang model."""

from .cells import Notebook, code, md

NOTEBOOK = Notebook("self-attention", [
md("""
# Self-attention, step by step, on a model of Tang poems

This notebook follows a classic Chinese note on self-attention in its order: a table of weights
over the words of 今天天气很好 and the weighted sum c_t = Σ_i w_ti x_i; then queries, keys and
values, softmax(QKᵀ/√d)V; then the mask, and why training cannot do without it; then many heads.

Every step is computed by hand in NumPy and checked against what a real model does. The model is
`tang`, which ships with tfcli: a 4-block GPT-2 trained on the Complete Tang Poems, one token per
character, D = 256 numbers per token, 8 heads of 32.
""", """
# 一步一步看自注意力：在一个唐诗模型上

这个笔记本按一篇经典的中文自注意力笔记的顺序走：先是“今天天气很好”这几个字之间的一张权重表，
以及加权求和 c_t = Σ_i w_ti x_i；然后是查询、键、值（Q/K/V）和 softmax(QKᵀ/√d)V；再是掩码（mask），
以及训练为什么离不开它；最后是多头。

每一步都用 NumPy 亲手算一遍，并与真实模型的计算相核对。模型是 tfcli 自带的 `tang`：
一个在《全唐诗》上训练的 4 层 GPT-2，一个字一个词元，每个词元 D = 256 个数，8 个头，每头 32 个数。
"""),
code("""
import numpy as np
import tfcli

model = tfcli.load("tang")
text = "今天天气很好"
chars = model.to_str_tokens(text)
T = len(chars)
print(model)
print(chars)
""", """
import numpy as np
import tfcli

model = tfcli.load("tang")
text = "今天天气很好"
chars = model.to_str_tokens(text)  # 一个字一个词元
T = len(chars)
print(model)
print(chars)
"""),
md("""
## 1. A table of weights, and c_t = Σ_i w_ti x_i

Self-attention gives each word a new vector that mixes in the others: row t of a weight table says
how much word t takes from each word i, the weights are positive and each row sums to 1, and the
new vector is the weighted sum

c_t = Σ_i w_ti x_i.

Where do the weights come from? The simplest answer: from how alike the vectors are, w_t =
softmax(x_t · x_i over i). Let us try it with tang's own vectors for 今天天气很好 (the input of its
first block: each character's embedding plus its position's). `run_with_cache` runs the model once
and keeps what every site of the pass saw.
""", """
## 1. 一张权重表，和 c_t = Σ_i w_ti x_i

自注意力给每个字一个新向量，把其他字的信息混进来：权重表的第 t 行说第 t 个字从每个字 i 那里取多少，
权重都是正数，每行加起来等于 1，新向量就是加权和

c_t = Σ_i w_ti x_i。

权重从哪里来？最简单的答案：看两个向量有多像，w_t = softmax(x_t · x_i，对所有 i)。
下面就用 tang 模型自己的向量（第一个块的输入：每个字的词嵌入加上它所在位置的位置嵌入）来试一试。
`run_with_cache` 让模型跑一遍，并把每个位点（site）看到的值都留下来。
"""),
code("""
logits, cache = model.run_with_cache(text)
x = cache["embed"]  # [T, D] what block 0 reads: token + position embeddings


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def table(w, title):
    right = lambda s, n: " " * (n - 2 * len(s)) + s  # a Chinese character is two columns wide
    print(title)
    print("    " + "".join(right(c, 6) for c in chars))
    for c, row in zip(chars, w):
        print(right(c, 4) + "".join(f"{v:6.2f}" for v in row))


w_plain = softmax(x @ x.T)  # [T, D] @ [D, T] -> [T, T]
table(w_plain, "w_ti = softmax(x_t · x_i): row t looks at column i")
c = w_plain @ x  # [T, T] @ [T, D] -> [T, D]
by_hand = np.array([sum(w_plain[t, i] * x[i] for i in range(T)) for t in range(T)])  # c_t = Σ_i w_ti x_i
print("rows sum to 1:", np.allclose(w_plain.sum(axis=1), 1), "; c = w x is the sum:", np.allclose(c, by_hand, atol=1e-6))
""", """
logits, cache = model.run_with_cache(text)
x = cache["embed"]  # [T, D] 第 0 块读到的：词嵌入 + 位置嵌入


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def table(w, title):
    right = lambda s, n: " " * (n - 2 * len(s)) + s  # a Chinese character is two columns wide
    print(title)
    print("    " + "".join(right(c, 6) for c in chars))
    for c, row in zip(chars, w):
        print(right(c, 4) + "".join(f"{v:6.2f}" for v in row))


w_plain = softmax(x @ x.T)  # [T, D] @ [D, T] -> [T, T]
table(w_plain, "w_ti = softmax(x_t · x_i)：第 t 行看第 i 列")
c = w_plain @ x  # [T, T] @ [T, D] -> [T, D]
by_hand = np.array([sum(w_plain[t, i] * x[i] for i in range(T)) for t in range(T)])  # c_t = Σ_i w_ti x_i
print("每行和为 1：", np.allclose(w_plain.sum(axis=1), 1), "；c = w x 就是加权和：", np.allclose(c, by_hand, atol=1e-6))
"""),
md("""
Each character takes the most from itself (the diagonal: a vector is always most like itself) and
spreads the rest fairly evenly: this table knows nothing about which words *should* look at which.
The two 天 do find each other (each gives the other 0.20, its largest share after itself), but
only weakly, because their positions differ. To learn
what to look for, a model needs parameters: queries, keys and values.
""", """
每个字从自己那里取得最多（对角线：一个向量总是和自己最像），其余的分得比较平均：
这张表并不知道哪个字*应该*看哪个字。两个“天”倒是互相认出来了（各给对方 0.20，仅次于给自己的），但很弱，因为它们的位置不同。
要学会该看什么，模型需要参数：查询、键和值。
"""),
md("""
## 2. Q, K, V: softmax(QKᵀ/√d)V

Three learned matrices turn each vector into three: a query q = x W_Q (what this word is looking
for), a key k = x W_K (what it offers to be found by) and a value v = x W_V (what it gives when
found). The weights are the softmax of query-key dot products, scaled by √d so that they do not
grow with the head's size d, and the output is the weighted sum of the values:

Attention(Q, K, V) = softmax(QKᵀ/√d) V.

tang's weights are the checkpoint's own tensors, read here with safetensors under their Hugging
Face names (`h.0.attn.c_attn.weight` holds W_Q, W_K and W_V side by side, [256, 768]). GPT-2
normalises x first (LayerNorm, "pre-LN"), and each of the 8 heads uses its own slice of 32
numbers: head 0 is columns 0-31 of q, k and v.
""", """
## 2. Q、K、V：softmax(QKᵀ/√d)V

三个学到的矩阵把每个向量变成三个：查询 q = x W_Q（这个字在找什么），键 k = x W_K（它凭什么被找到），
值 v = x W_V（被找到时它给出什么）。权重是查询与键的点积再做 softmax，点积先除以 √d，
这样权重不会随着头的大小 d 变大，输出就是值的加权和：

Attention(Q, K, V) = softmax(QKᵀ/√d) V。

tang 的权重就是检查点文件里的张量，这里用 safetensors 按 Hugging Face 的名字读出来
（`h.0.attn.c_attn.weight` 把 W_Q、W_K、W_V 并排存放，[256, 768]）。GPT-2 先对 x 做归一化
（LayerNorm，“前置归一化”），8 个头各用 32 个数的一段：第 0 个头是 q、k、v 的第 0-31 列。
"""),
code("""
from pathlib import Path

from safetensors.numpy import load_file

folder = Path(model._lm.path)  # the model's folder (the public API has no name for it yet)
W = {k.removeprefix("transformer."): v.astype(np.float32) for k, v in load_file(folder / "model.safetensors").items()}


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b  # [T, D]


h = layer_norm(x, W["h.0.ln_1.weight"], W["h.0.ln_1.bias"])  # [T, D]
qkv = h @ W["h.0.attn.c_attn.weight"] + W["h.0.attn.c_attn.bias"]  # [T, D] @ [D, 3D] -> [T, 3D]
Q, K, V = np.split(qkv, 3, axis=1)  # [T, D] each: all 8 heads side by side
d = model.config.head_dim  # 32
q, k, v = Q[:, :d], K[:, :d], V[:, :d]  # head 0: [T, d] each

causal = np.tri(T, dtype=bool)  # [T, T] True where i <= t (section 3 says why)
scores = q @ k.T / np.sqrt(d)  # [T, d] @ [d, T] -> [T, T]
w0 = softmax(np.where(causal, scores, -np.inf))  # [T, T]
out0 = w0 @ v  # [T, T] @ [T, d] -> [T, d]: softmax(QKᵀ/√d)V
table(w0, "block 0, head 0: softmax(q kᵀ/√d)")
print("the model's own weights:", np.allclose(w0, cache["attn", 0][0], atol=1e-5),
      "; its own output:", np.allclose(out0, cache["z", 0][:, 0], atol=1e-5))
""", """
from pathlib import Path

from safetensors.numpy import load_file

folder = Path(model._lm.path)  # 模型所在的文件夹（公开 API 还没有给它起名字）
W = {k.removeprefix("transformer."): v.astype(np.float32) for k, v in load_file(folder / "model.safetensors").items()}


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b  # [T, D]


h = layer_norm(x, W["h.0.ln_1.weight"], W["h.0.ln_1.bias"])  # [T, D]
qkv = h @ W["h.0.attn.c_attn.weight"] + W["h.0.attn.c_attn.bias"]  # [T, D] @ [D, 3D] -> [T, 3D]
Q, K, V = np.split(qkv, 3, axis=1)  # 各 [T, D]：8 个头并排
d = model.config.head_dim  # 32
q, k, v = Q[:, :d], K[:, :d], V[:, :d]  # 第 0 个头：各 [T, d]

causal = np.tri(T, dtype=bool)  # [T, T] i <= t 处为 True（第 3 节讲为什么）
scores = q @ k.T / np.sqrt(d)  # [T, d] @ [d, T] -> [T, T]
w0 = softmax(np.where(causal, scores, -np.inf))  # [T, T]
out0 = w0 @ v  # [T, T] @ [T, d] -> [T, d]：softmax(QKᵀ/√d)V
table(w0, "第 0 块，第 0 个头：softmax(q kᵀ/√d)")
print("与模型自己的权重相同：", np.allclose(w0, cache["attn", 0][0], atol=1e-5),
      "；与模型自己的输出相同：", np.allclose(out0, cache["z", 0][:, 0], atol=1e-5))
"""),
md("""
This table has learned something. Head 0 of block 0 looks at the *previous* character: 好 gives
0.87 of its weight to 很, 天 (the second) 0.69 to the first 天, 气 0.65 to 天. A previous-token head
is one of the first things small language models learn: which character came just before is most
of what you need to guess the next one in a poem.

The same table, drawn: `tfcli.attention` returns a result that prints as text in a terminal and
draws itself as a heatmap in a notebook (row: the character looking; column: the one looked at).
""", """
这张表学到了东西。第 0 块的第 0 个头看的是*前一个*字：“好”把 0.87 的权重给了“很”，
第二个“天”把 0.69 给了第一个“天”，“气”把 0.65 给了“天”。“看前一个字”的头是小语言模型最先学会的东西之一：
要猜诗里的下一个字，前一个字是什么就是最重要的线索。

同一张表画出来：`tfcli.attention` 返回的结果在终端里打印成文字，在笔记本里画成热力图
（行：正在看的字；列：被看的字）。
"""),
code("""
tfcli.attention(model, text, block=0, head=0)
"""),
md("""
## 3. The mask, and why training needs it

The table above is a triangle: nothing above the diagonal. That is the mask. Before the softmax,
every score of a later word (i > t) is set to −∞, so its weight is exactly 0: a word sees itself
and the words before it, never the words after it.

Why? Because of how a language model is trained. It reads a whole poem at once and, at every
position, predicts the next character. If position t could look at position t + 1, the answer
would be right there in the input: 就漏题了, the exam paper would come with its answers. The model
would learn to copy instead of to predict, and be useless the moment it has to write a character
nobody has given it. The mask is what makes one pass over a text T exams at once, each honest.

`tfcli.mask` draws the pattern: the softmax of equal scores under the mask (row t spreads its
weight evenly over the t + 1 words it may see).
""", """
## 3. 掩码，以及训练为什么需要它

上面的表是个三角形：对角线以上什么都没有。这就是掩码。在 softmax 之前，所有后面的字（i > t）的分数
都被设成 −∞，所以它们的权重正好是 0：一个字只能看到自己和前面的字，永远看不到后面的字。

为什么？因为语言模型是这样训练的：它一次读进整首诗，在每个位置上预测下一个字。如果第 t 个位置能看到
第 t + 1 个位置，答案就摆在输入里了——就漏题了，试卷上直接印着答案。模型会学会抄答案而不是预测，
一旦要写出没人给过它的字就毫无用处。有了掩码，对一段文本跑一遍，就是同时进行 T 场考试，而且每一场都不作弊。

`tfcli.mask` 画出这个图案：在掩码下对相同的分数做 softmax（第 t 行把权重平均分给它能看到的 t + 1 个字）。
"""),
code("""
tfcli.mask(text)
"""),
md("""
What would leak without it? The same head with the mask taken away spreads much of its weight over
characters that come later. And the real model keeps the rule exactly: change the last character
(好 -> 坏) and the model's outputs at the five positions before it do not move by a single bit,
while the last one does.
""", """
没有掩码会漏掉什么？同一个头去掉掩码后，会把很大一部分权重分给后面的字。而真实模型严格遵守这条规则：
把最后一个字换掉（好 -> 坏），模型在它之前五个位置上的输出一个比特都不变，只有最后一个位置变了。
"""),
code("""
w_open = softmax(scores)  # [T, T] the same head without the mask
future = (w_open * ~causal).sum(axis=1)  # [T] weight each row would put on later characters
for ch, share in zip(chars, future):
    print(f"{ch}: {share:.2f} of its weight on what comes after it")

# the whole model on both texts: a character's output depends only on it and the ones before
before, changed = model(text), model("今天天气很坏")  # [T, V] each
same_before = bool((changed[:-1] == before[:-1]).all())
print("outputs before the changed character identical:", same_before,
      "; the last one moved:", not np.allclose(changed[-1], before[-1]))
""", """
w_open = softmax(scores)  # [T, T] 同一个头，去掉掩码
future = (w_open * ~causal).sum(axis=1)  # [T] 每一行会分给后面字的权重
for ch, share in zip(chars, future):
    print(f"{ch}：{share:.2f} 的权重落在它后面的字上")

# 整个模型跑两段文字：每个字的输出只取决于它自己和它前面的字
before, changed = model(text), model("今天天气很坏")  # [T, V] 各一个
same_before = bool((changed[:-1] == before[:-1]).all())
print("被改的字之前的输出完全相同：", same_before, "；最后一个位置变了：", not np.allclose(changed[-1], before[-1]))
"""),
md("""
Without the mask, 今 would put 0.95 of head 0's weight on the characters after it: at training
time, the answer.

## 4. Many heads

One head asks one question ("what came just before me?"). A block has 8, each with its own W_Q,
W_K, W_V slices of 32 numbers: 8 × 32 = 256 = D. Each head makes its own table and its own 32
outputs; the 8 outputs are concatenated back to 256 numbers and mixed by one more matrix, W_O,
before they are added to the residual stream. Here are all 8 tables of block 0:
""", """
如果没有掩码，“今”会把第 0 个头 0.95 的权重放在它后面的字上：在训练时，那就是答案。

## 4. 多头

一个头问一个问题（“我前面是什么字？”）。一个块有 8 个头，每个头有自己那 32 个数的 W_Q、W_K、W_V：
8 × 32 = 256 = D。每个头算出自己的表和自己的 32 个输出；8 个输出拼接回 256 个数，再乘上一个矩阵 W_O，
然后加回残差流。下面是第 0 块的全部 8 张表：
"""),
code("""
heads0 = tfcli.attention(model, text, block=0)
heads0
"""),
md("""
All heads at once, by hand: reshape [T, 256] to [8 heads, T, 32], one batched product for the 8
tables, the 8 outputs concatenated and multiplied by W_O. It is exactly what the block adds to
the residual stream (`attn_out`).
""", """
一次算完所有的头：把 [T, 256] 变成 [8 个头, T, 32]，一次批量乘法得到 8 张表，8 个输出拼接后乘以 W_O。
结果正是这个块加到残差流里的东西（`attn_out`）。
"""),
code("""
H = model.config.n_head
split = lambda m: m.reshape(T, H, d).transpose(1, 0, 2)  # [T, H*d] -> [H, T, d]
qh, kh, vh = split(Q), split(K), split(V)
weights = softmax(np.where(causal, qh @ kh.transpose(0, 2, 1) / np.sqrt(d), -np.inf))  # [H, T, T]
z = weights @ vh  # [H, T, T] @ [H, T, d] -> [H, T, d]
concat = z.transpose(1, 0, 2).reshape(T, H * d)  # [T, H*d]: the heads side by side
attn_out = concat @ W["h.0.attn.c_proj.weight"] + W["h.0.attn.c_proj.bias"]  # [T, D] @ [D, D] -> [T, D]
print("8 tables:", np.allclose(weights, cache["attn", 0], atol=1e-5),
      "; the block's attention output:", np.allclose(attn_out, cache["attn_out", 0], atol=1e-4))
for head in range(H):
    i = int(weights[head, -1].argmax())
    print(f"head {head}: 好 looks most at {chars[i]} ({weights[head, -1, i]:.2f})")
""", """
H = model.config.n_head
split = lambda m: m.reshape(T, H, d).transpose(1, 0, 2)  # [T, H*d] -> [H, T, d]
qh, kh, vh = split(Q), split(K), split(V)
weights = softmax(np.where(causal, qh @ kh.transpose(0, 2, 1) / np.sqrt(d), -np.inf))  # [H, T, T]
z = weights @ vh  # [H, T, T] @ [H, T, d] -> [H, T, d]
concat = z.transpose(1, 0, 2).reshape(T, H * d)  # [T, H*d]：各头并排
attn_out = concat @ W["h.0.attn.c_proj.weight"] + W["h.0.attn.c_proj.bias"]  # [T, D] @ [D, D] -> [T, D]
print("8 张表：", np.allclose(weights, cache["attn", 0], atol=1e-5),
      "；这个块的注意力输出：", np.allclose(attn_out, cache["attn_out", 0], atol=1e-4))
for head in range(H):
    i = int(weights[head, -1].argmax())
    print(f"第 {head} 个头：“好”最看重“{chars[i]}”（{weights[head, -1, i]:.2f}）")
"""),
md("""
Different heads, different questions: from 好, heads 0 and 1 look at 很 (0.87 and 0.73), heads
2, 3 and 6 mostly at the first character 今. The deeper blocks do the same on vectors that already
carry what the earlier ones found.

## What this notebook showed (checked below)

- Plain similarity weights, softmax(x_t · x_i), give each character most weight on itself: every
  diagonal entry is the largest of its row; the two 天 give each other 0.20.
- tang's block 0, head 0, computed by hand as softmax(QKᵀ/√d)V, equals the model's own weights
  and output; it is a previous-token head (好 -> 很 0.87, 天 -> 天 0.69, 气 -> 天 0.65).
- The mask: without it, 今 would put 0.95 of that head's weight on later characters; with it,
  changing 好 to 坏 leaves the outputs at the five positions before it identical.
- Many heads: 8 × 32 = 256; the 8 tables and the concatenation times W_O equal the block's own.
""", """
不同的头，不同的问题：从“好”出发，第 0、1 个头看“很”（0.87 和 0.73），第 2、3、6 个头主要看第一个字“今”。
更深的块做同样的事，只是它们的向量里已经带着前面的块找到的东西。

## 这个笔记本说明了什么（下面逐条核对）

- 只看相似度的权重 softmax(x_t · x_i) 让每个字给自己最大的权重：每一行最大的都是对角线上的那个；
  两个“天”互相给 0.20。
- tang 第 0 块第 0 个头，用 softmax(QKᵀ/√d)V 亲手算出来，与模型自己的权重和输出相同；
  它是一个“看前一个字”的头（好 -> 很 0.87，天 -> 天 0.69，气 -> 天 0.65）。
- 掩码：没有它，“今”会把这个头 0.95 的权重放在后面的字上；有了它，把“好”换成“坏”，
  之前五个位置的输出完全不变。
- 多头：8 × 32 = 256；8 张表以及拼接后乘 W_O 的结果都与模型自己的相同。
"""),
code("""
assert (w_plain.argmax(axis=1) == np.arange(T)).all()
assert round(float(w_plain[1, 2]), 2) == round(float(w_plain[2, 1]), 2) == 0.20
assert np.argsort(w_plain[1])[-2] == 2 and np.argsort(w_plain[2])[-2] == 1
assert np.allclose(by_hand, c, atol=1e-6)
assert np.allclose(w0, cache["attn", 0][0], atol=1e-5) and np.allclose(out0, cache["z", 0][:, 0], atol=1e-5)
assert [round(float(w0[t, t - 1]), 2) for t in (5, 2, 3)] == [0.87, 0.69, 0.65]
assert round(float(future[0]), 2) == 0.95 and same_before
assert H * d == model.config.d_model == 256
assert np.allclose(weights, cache["attn", 0], atol=1e-5) and np.allclose(attn_out, cache["attn_out", 0], atol=1e-4)
assert np.allclose(heads0.weights[0], cache["attn", 0], atol=1e-5)
assert [chars[int(weights[hd, -1].argmax())] for hd in (0, 1, 2, 3, 6)] == ["很", "很", "今", "今", "今"]
assert [round(float(weights[hd, -1, 4]), 2) for hd in (0, 1)] == [0.87, 0.73]
"""),
])
