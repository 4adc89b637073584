"use strict";
// Every label and explanation of the page, in English and Chinese (`tfcli explore --lang zh`): the same keys in both.

const STRINGS = {
  en: {
    subtitle: "{model} · {n} tokens · {layers} layers × {heads} heads",
    tab_attention: "Attention", tab_lens: "Logit lens", tab_next: "Next token", tab_model: "The model",
    attn_intro: "Each head of each block (transformer layer) mixes information between tokens. A token (left) looks " +
      "back at the tokens before it (right); a line's strength is the attention weight, and each token's weights sum " +
      "to 1. Hover or focus a token to see only its row.",
    layer: "Block", head: "Head", all_lines: "draw all heads of the block", all_heads: "all {n} heads",
    head_option: "head {h}", head_option_kv: "head {h} (kv {k})",
    gqa: "Grouped-query attention: {hkv} key/value heads for {h} query heads. {groups}.",
    gqa_group: "heads {list} share kv head {k}",
    no_gqa: "Every query head has its own keys and values.",
    headview_caption: "Head view: who looks at whom",
    heatmap_caption: "Heatmap of one head: rows look at columns",
    readout_hint: "Hover or focus the heatmap (arrow keys move) to read a weight.",
    readout: "token {q} {ql} → token {k} {kl}: {w}",
    thumbs_title: "All {n} heads of block {l}",
    thumbs_intro: "Rows are the tokens looking, columns the tokens looked at; darker is more weight. Pick a head to " +
      "draw it above.",
    lines_cut: "Lines below {w} are not drawn.",
    lens_intro: "The logit lens: the residual stream at each layer (layer 0 = the embeddings, layer i = after block " +
      "i-1), put through the model's final norm and unembedding, read as a guess of the next token. Each cell shows " +
      "the top token and its probability; hover or focus a cell (arrow keys move) for the top {k}. A green frame " +
      "marks a guess equal to the text's actual next token.",
    embeddings: "embeddings", layer_0: "layer 0 (embeddings)", layer_n: "layer {l}", position: "position",
    input_token: "input", next_row: "next in text",
    next_intro: "The model's distribution for the token after each position, and what the sampler does to it. Pick a " +
      "position, then move the controls.",
    next_note: "Recomputed in this page on the {n} most likely tokens stored for each position (their logits kept " +
      "exactly), with the rules of tfcli's sampler: temperature divides the logits, softmax over the tokens top-k " +
      "keeps (ties with the k-th are kept), top-p keeps each token whose more likely predecessors total less than p, " +
      "min-p drops tokens below min-p × the top token's probability, then the rest is renormalised. Tokens outside " +
      "the stored {n} count as absent (as with top-k {n}); no repetition penalty. The controls start at what " +
      "`tfcli generate` uses for this model.",
    temperature: "temperature", top_k: "top-k", top_p: "top-p", min_p: "min-p", reset: "reset to the model's",
    off: "off", greedy: "greedy",
    next_summary: "After position {pos} {label}: {kept} of {n} candidates kept; the stored {n} hold {mass} of the " +
      "model's probability.",
    col_rank: "#", col_token: "token", col_id: "id", col_logit: "logit", col_model: "model p",
    col_final: "sampled from",
    model_intro: "The shapes of the model, its parameter counts and the text's tokens as the model saw them.",
    family: "family", layers: "layers (L)", d_model: "width (D)", heads: "query heads (H)",
    kv_heads: "key/value heads (Hkv)", head_dim: "head size (Dh)", d_ff: "MLP width (F)", vocab: "vocabulary (V)",
    context: "context (T)", norm: "norm", mlp: "MLP",
    positions: "positions", tied: "unembedding tied to embedding", yes: "yes", no: "no",
    params_exact: "parameters (every stored tensor)", params_tally: "weight matrices (3Blue1Brown's tally)",
    why_exact: "embeddings, attention and MLP matrices, biases and norms; a tied unembedding once",
    why_tally: "matrices only, the embedding and the unembedding counted apart",
    stored_title: "What this page stores (and what it cut)",
    stored_attn: "Attention: every head of every block, the weights on earlier tokens only (the future is exactly 0 " +
      "and not stored), in steps of 1/{q}.",
    stored_lens: "Logit lens: the top {k} tokens of each layer and position, probabilities in steps of 1/{q}.",
    stored_next: "Next token: the {n} largest logits of each position, exact; of the rest of the vocabulary only " +
      "their total probability.",
    stored_limit: "Texts over {t} tokens are refused for this model, so that the page stays small.",
    tokens_title: "The tokens, with their ids",
    footer: "Made by tfcli explore: one file, no network; the numbers come from tfcli's NumPy forward pass.",
  },
  zh: {
    subtitle: "{model} · {n} 个词元 · {layers} 层 × {heads} 个头",
    tab_attention: "注意力", tab_lens: "逻辑透镜", tab_next: "下一个词元", tab_model: "模型",
    attn_intro: "每个块（Transformer 层）的每个头都在词元之间传递信息。左边的词元回看它之前的词元（右边）；线越深，注意力权重越大，每个词元的权重之和为 1。把鼠标移到（或用键盘聚焦）一个词元上，" +
      "只看它那一行。",
    layer: "块", head: "头", all_lines: "画出这个块的所有头", all_heads: "全部 {n} 个头",
    head_option: "头 {h}", head_option_kv: "头 {h}（kv {k}）",
    gqa: "分组查询注意力：{h} 个查询头共用 {hkv} 个键/值头。{groups}。",
    gqa_group: "头 {list} 共用 kv 头 {k}",
    no_gqa: "每个查询头都有自己的键和值。",
    headview_caption: "头视图：谁在看谁",
    heatmap_caption: "单个头的热力图：行看向列",
    readout_hint: "把鼠标移到热力图上（或聚焦后用方向键）读出权重。",
    readout: "词元 {q} {ql} → 词元 {k} {kl}：{w}",
    thumbs_title: "第 {l} 个块的全部 {n} 个头",
    thumbs_intro: "行是正在看的词元，列是被看的词元；颜色越深权重越大。选一个头，在上面画出它。",
    lines_cut: "低于 {w} 的线不画。",
    lens_intro: "逻辑透镜：把每一层的残差流（第 0 层 = 嵌入，第 i 层 = 第 i-1 个块之后）送进模型最后的归一化和反嵌入，当作对下一个词元的猜测。每格显示概率最高的词元和它的概率；" +
      "悬停或聚焦一格（方向键移动）看前 {k} 名。绿框表示猜中了文本里真正的下一个词元。",
    embeddings: "嵌入", layer_0: "第 0 层（嵌入）", layer_n: "第 {l} 层", position: "位置", input_token: "输入", next_row: "文本中的下一个",
    next_intro: "模型在每个位置对下一个词元的分布，以及采样器如何改变它。先选一个位置，再调节控件。",
    next_note: "在本页中对每个位置保存的 {n} 个最可能的词元（其 logit 原样保存）重新计算，规则与 tfcli 的采样器相同：logit 除以温度，" +
      "对 top-k 保留的词元做 softmax（与第 k 名并列的也保留），top-p 保留比它更可能的词元总和小于 p 的每个词元，min-p 去掉概率低于 min-p × 最高概率的词元，最后重新归一化。" +
      "保存的 {n} 个以外的词元视为不存在（相当于 top-k {n}）；不含重复惩罚。控件的初始值就是 `tfcli generate` 对这个模型使用的值。",
    temperature: "温度", top_k: "top-k", top_p: "top-p", min_p: "min-p", reset: "恢复模型默认值",
    off: "关", greedy: "贪心",
    next_summary: "位置 {pos} {label} 之后：{n} 个候选中保留 {kept} 个；保存的 {n} 个占模型概率的 {mass}。",
    col_rank: "#", col_token: "词元", col_id: "编号", col_logit: "logit", col_model: "模型概率", col_final: "采样概率",
    model_intro: "模型的形状、参数数量，以及模型看到的文本词元。",
    family: "系列", layers: "层数 (L)", d_model: "宽度 (D)", heads: "查询头 (H)", kv_heads: "键/值头 (Hkv)",
    head_dim: "头大小 (Dh)", d_ff: "MLP 宽度 (F)", vocab: "词表 (V)", context: "上下文 (T)", norm: "归一化", mlp: "MLP",
    positions: "位置编码", tied: "反嵌入与嵌入共享", yes: "是", no: "否",
    params_exact: "参数（所有保存的张量）", params_tally: "权重矩阵（3Blue1Brown 的算法）",
    why_exact: "嵌入、注意力和 MLP 矩阵、偏置和归一化；共享的反嵌入只算一次",
    why_tally: "只算矩阵，嵌入和反嵌入分开算",
    stored_title: "本页保存了什么（删去了什么）",
    stored_attn: "注意力：每个块的每个头，只存对之前词元的权重（未来恰好为 0，不保存），精度 1/{q}。",
    stored_lens: "逻辑透镜：每层每个位置前 {k} 名词元，概率精度 1/{q}。",
    stored_next: "下一个词元：每个位置最大的 {n} 个 logit，原样保存；词表其余部分只存总概率。",
    stored_limit: "这个模型超过 {t} 个词元的文本会被拒绝，以保持页面小巧。",
    tokens_title: "词元及其编号",
    footer: "由 tfcli explore 生成：一个文件，不联网；数字来自 tfcli 的 NumPy 前向计算。",
  },
};
