"use strict";
// The rules of tfcli's sampler (tfcli/engine/sampling.py), for the next-token view: kept in step with it by
// tests/test_explore.py, which compares this page's numbers with Sampler.candidates.

/**
 * tfcli's Sampler.candidates (engine/sampling.py) on the stored candidates' logits, without the
 * repetition penalty: the probability of each candidate in the distribution sampled from.
 */
function samplerProbs(logits, temperature, topK, topP, minP) {
  const n = logits.length;
  const out = new Float64Array(n);
  if (temperature === 0) { // greedy: the first largest logit, as np.argmax
    let best = 0;
    for (let i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    out[best] = 1;
    return out;
  }
  let ids = [...Array(n).keys()];
  if (topK > 0 && topK < n) {
    const kth = Array.from(logits).sort((a, b) => b - a)[topK - 1];
    ids = ids.filter((i) => logits[i] >= kth); // ties with the k-th are kept, as in transformers
  }
  const x = ids.map((i) => logits[i] / temperature);
  const m = Math.max(...x);
  let e = x.map((v) => Math.exp(v - m));
  let total = e.reduce((a, b) => a + b, 0);
  let probs = e.map((v) => v / total);
  if (topP < 1) {
    const order = [...probs.keys()].sort((a, b) => probs[b] - probs[a] || a - b); // descending, stable
    const keep = new Set();
    let before = 0;
    for (const j of order) {
      if (before < topP) keep.add(j); // kept while the more likely tokens' total is still below p
      before += probs[j];
    }
    const kept = [...probs.keys()].filter((j) => keep.has(j));
    ids = kept.map((j) => ids[j]);
    probs = kept.map((j) => probs[j]);
  }
  if (minP > 0) {
    const top = Math.max(...probs);
    const kept = [...probs.keys()].filter((j) => probs[j] >= minP * top);
    ids = kept.map((j) => ids[j]);
    probs = kept.map((j) => probs[j]);
  }
  total = probs.reduce((a, b) => a + b, 0);
  ids.forEach((i, j) => { out[i] = probs[j] / total; });
  return out;
}
