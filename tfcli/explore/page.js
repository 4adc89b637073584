"use strict";
// The page of `tfcli explore`: draws what tfcli/analysis/explore.py stored. No request leaves the page.

const D = JSON.parse(document.getElementById("tfcli-data").textContent);

const S = STRINGS[D.lang] || STRINGS.en;

function t(key, args) {
  const s = S[key] !== undefined ? S[key] : STRINGS.en[key];
  return s.replace(/\{(\w+)\}/g, (m, k) => (args && args[k] !== undefined ? String(args[k]) : m));
}

function esc(s) {
  return String(s).replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function clip(s, n) {
  const chars = Array.from(s);
  return chars.length > n ? chars.slice(0, n - 1).join("") + "…" : s;
}

function pct(p) {
  return p >= 0.995 ? (p * 100).toFixed(0) + "%" : p >= 0.1 ? (p * 100).toFixed(1) + "%" : (p * 100).toFixed(2) + "%";
}

/** Markup for one element: tag("rect", { x: 1 }, inner) -> '<rect x="1">inner</rect>', values escaped. */
function tag(name, attrs, inner) {
  const a = Object.entries(attrs).map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
  return inner === undefined ? `<${name}${a}/>` : `<${name}${a}>${inner}</${name}>`;
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// --- the stored arrays --------------------------------------------------------------------------

function decode(a) {
  const bin = atob(a.b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const kind = { "<u2": Uint16Array, "<u4": Uint32Array, "<f4": Float32Array }[a.dtype];
  return new kind(bytes.buffer);
}

const A = {};
for (const [name, a] of Object.entries(D.arrays)) A[name] = decode(a);
const T = D.tokens.length;
const L = D.shape.layers;
const H = D.shape.heads;
const Q = D.limits.quant;
const TRI = (T * (T + 1)) / 2;
const LENS_K = D.limits.lens_top;
const NEXT_N = D.limits.next_top;
const LINE_MIN = 0.005; // lines this faint would not be seen; they are left out of the drawing
const labels = D.tokens.map((x) => x.label);

/** The weight token q gives token k in head h of layer l (0 for the future). */
function weight(l, h, q, k) {
  if (k > q) return 0;
  return A.attn[(l * H + h) * TRI + (q * (q + 1)) / 2 + k] / Q;
}

function headColour(h, alpha) {
  const hue = Math.round((h * 360) / H + 210) % 360;
  return alpha === undefined ? `hsl(${hue} 70% 42%)` : `hsl(${hue} 70% 42% / ${alpha})`;
}

function kvOf(h) {
  return Math.floor(h / (H / D.shape.kv_heads));
}

// --- tabs ---------------------------------------------------------------------------------------

const VIEWS = ["attention", "lens", "next", "model"];

function showView(name) {
  for (const v of VIEWS) {
    document.getElementById("view-" + v).hidden = v !== name;
    const b = document.getElementById("tab-" + v);
    b.setAttribute("aria-selected", String(v === name));
    b.tabIndex = v === name ? 0 : -1;
  }
}

function buildTabs() {
  const nav = document.getElementById("tabs");
  VIEWS.forEach((v, i) => {
    const b = el("button", { id: "tab-" + v, role: "tab", "aria-controls": "view-" + v, type: "button" },
      t("tab_" + v));
    b.addEventListener("click", () => showView(v));
    b.addEventListener("keydown", (e) => {
      const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      const next = VIEWS[(i + d + VIEWS.length) % VIEWS.length];
      showView(next);
      document.getElementById("tab-" + next).focus();
    });
    nav.appendChild(b);
  });
  const wanted = location.hash.replace("#", "");
  showView(VIEWS.includes(wanted) ? wanted : "attention");
}

// --- logit lens ---------------------------------------------------------------------------------

function lensAt(row, pos) {
  const out = [];
  for (let j = 0; j < LENS_K; j++) {
    const o = (row * T + pos) * LENS_K + j;
    out.push({ id: A.lens_ids[o], p: A.lens_p[o] / Q });
  }
  return out;
}

function vocab(id) {
  return D.vocab[String(id)] !== undefined ? D.vocab[String(id)] : `#${id}`;
}

/** Row `row` of the residual stream, numbered as in the CLI and its JSON: 0 = the embeddings, i = after block i-1. */
function lensRowName(row) {
  return row === 0 ? t("layer_0") : t("layer_n", { l: row, b: row - 1 });
}

function buildLens() {
  const box = document.getElementById("lens-grid");
  const parts = ["<table class=\"lens\" id=\"lens-table\"><thead><tr>", `<th class="row">${esc(t("position"))}</th>`];
  for (let i = 0; i < T; i++) parts.push(`<th>${i}</th>`);
  parts.push("</tr><tr>", `<th class="row">${esc(t("input_token"))}</th>`);
  for (let i = 0; i < T; i++) parts.push(`<th title="${esc(labels[i])}">${esc(clip(labels[i], 8))}</th>`);
  parts.push("</tr></thead><tbody>");
  // The last layer first: read upwards, the guess forms layer by layer from the embeddings.
  for (let row = L; row >= 0; row--) {
    parts.push(`<tr><th class="row">${esc(lensRowName(row))}</th>`);
    for (let i = 0; i < T; i++) {
      const top = lensAt(row, i)[0];
      const hit = i + 1 < T && top.id === D.tokens[i + 1].id;
      const bg = `rgba(36,87,197,${(0.06 + 0.5 * top.p).toFixed(3)})`;
      const cell = {
        "data-row": row, "data-pos": i, "data-id": top.id, "data-p": top.p,
        class: hit ? "hit" : "", style: `background:${bg}`,
      };
      parts.push(tag("td", cell, esc(clip(vocab(top.id), 7)) + tag("span", { class: "p" }, pct(top.p))));
    }
    parts.push("</tr>");
  }
  parts.push(`</tbody><tfoot><tr><th class="row">${esc(t("next_row"))}</th>`);
  for (let i = 0; i < T; i++) parts.push(`<th>${i + 1 < T ? esc(clip(labels[i + 1], 8)) : ""}</th>`);
  parts.push("</tr></tfoot></table>");
  box.innerHTML = parts.join("");
  box.tabIndex = 0;
  const tip = document.getElementById("lens-tip");
  let cur = [L, T - 1];
  const show = (td) => {
    const row = +td.dataset.row, pos = +td.dataset.pos;
    cur = [row, pos];
    for (const x of box.querySelectorAll("td.cur")) x.classList.remove("cur");
    td.classList.add("cur");
    const name = lensRowName(row);
    const rows = lensAt(row, pos)
      .map((c) => `<tr><td>${esc(vocab(c.id))}</td><td>${pct(c.p)}</td><td>#${c.id}</td></tr>`)
      .join("");
    tip.innerHTML = `<strong>${esc(name)} · ${esc(t("position"))} ${pos} ${esc(JSON.stringify(labels[pos]))}</strong>` +
      `<table>${rows}</table>`;
    tip.hidden = false;
    const r = td.getBoundingClientRect();
    const w = tip.offsetWidth, hgt = tip.offsetHeight;
    tip.style.left = Math.max(4, Math.min(window.innerWidth - w - 4, r.left)) + "px";
    tip.style.top = (r.bottom + hgt + 8 < window.innerHeight ? r.bottom + 4 : Math.max(4, r.top - hgt - 4)) + "px";
  };
  box.addEventListener("mouseover", (e) => { const td = e.target.closest("td[data-row]"); if (td) show(td); });
  box.addEventListener("mouseleave", () => { tip.hidden = true; });
  box.addEventListener("focus", () => show(box.querySelector(`td[data-row="${cur[0]}"][data-pos="${cur[1]}"]`)));
  box.addEventListener("blur", () => { tip.hidden = true; });
  box.addEventListener("keydown", (e) => {
    const moves = { ArrowUp: [1, 0], ArrowDown: [-1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!moves[e.key]) return;
    e.preventDefault();
    const row = Math.max(0, Math.min(L, cur[0] + moves[e.key][0]));
    const pos = Math.max(0, Math.min(T - 1, cur[1] + moves[e.key][1]));
    const td = box.querySelector(`td[data-row="${row}"][data-pos="${pos}"]`);
    td.scrollIntoView({ block: "nearest", inline: "nearest" });
    show(td);
  });
}

// --- the next token -----------------------------------------------------------------------------

const next = { pos: T - 1 };
const KNOBS = ["temperature", "top_k", "top_p", "min_p"];

function knob(name) {
  return +document.getElementById(name).value;
}

function setKnobs(values) {
  for (const name of KNOBS) {
    let v = values[name];
    if (name === "top_k") v = Math.min(v, NEXT_N);
    if (name === "temperature") v = Math.min(v, 2);
    document.getElementById(name).value = v;
  }
  drawNext();
}

function buildNext() {
  document.getElementById("next-note").textContent = t("next_note", { n: NEXT_N });
  document.getElementById("top_k").max = NEXT_N;
  const strip = document.getElementById("positions");
  D.tokens.forEach((tok, i) => {
    const b = el("button", {
      type: "button", class: "t", role: "radio", "data-pos": i,
      "aria-checked": String(i === next.pos), tabindex: i === next.pos ? 0 : -1,
    });
    b.textContent = tok.label;
    b.appendChild(el("small", {}, String(i)));
    b.addEventListener("click", () => pickPosition(i));
    b.addEventListener("keydown", (e) => {
      const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (!d) return;
      e.preventDefault();
      const j = Math.max(0, Math.min(T - 1, i + d));
      pickPosition(j);
      strip.querySelector(`[data-pos="${j}"]`).focus();
    });
    strip.appendChild(b);
  });
  for (const name of KNOBS) document.getElementById(name).addEventListener("input", drawNext);
  document.getElementById("reset").addEventListener("click", () => setKnobs(D.sampling));
  setKnobs(D.sampling);
}

function pickPosition(i) {
  next.pos = i;
  for (const b of document.querySelectorAll("#positions button")) {
    const on = +b.dataset.pos === i;
    b.setAttribute("aria-checked", String(on));
    b.tabIndex = on ? 0 : -1;
  }
  drawNext();
}

function drawNext() {
  const temperature = knob("temperature"), topK = knob("top_k"), topP = knob("top_p"), minP = knob("min_p");
  document.getElementById("temperature-v").textContent =
    temperature === 0 ? `0 (${t("greedy")})` : temperature.toFixed(2);
  document.getElementById("top_k-v").textContent = topK === 0 ? `0 (${t("off")})` : String(topK);
  document.getElementById("top_p-v").textContent = topP >= 1 ? `1 (${t("off")})` : topP.toFixed(2);
  document.getElementById("min_p-v").textContent = minP === 0 ? `0 (${t("off")})` : minP.toFixed(2);
  const pos = next.pos;
  const logits = A.next_logits.subarray(pos * NEXT_N, (pos + 1) * NEXT_N);
  const ids = A.next_ids.subarray(pos * NEXT_N, (pos + 1) * NEXT_N);
  const lse = A.next_lse[pos];
  const final = samplerProbs(logits, temperature, topK, topP, minP);
  const model = Array.from(logits, (x) => Math.exp(x - lse)); // the model's own p over the whole vocabulary
  const mass = model.reduce((a, b) => a + b, 0);
  const kept = final.filter((p) => p > 0).length;
  document.getElementById("next-summary").textContent =
    t("next_summary", { pos, label: JSON.stringify(labels[pos]), kept, n: NEXT_N, mass: pct(mass) });
  const table = document.getElementById("next-table");
  table.dataset.pos = pos;
  table.dataset.knobs = JSON.stringify({ temperature, top_k: topK, top_p: topP, min_p: minP });
  const swatch = (colour) => tag("span", { class: "swatch", style: `background:${colour}` }, "");
  const heads = ["col_rank", "col_token", "col_id", "col_logit", "col_model", "col_final"]
    .map((k) => tag("th", {}, esc(t(k))));
  heads.push(tag("th", {},
    `${swatch("#b9c7e6")}${esc(t("col_model"))} ${swatch("var(--accent)")}${esc(t("col_final"))}`));
  const parts = [`<thead><tr>${heads.join("")}</tr></thead><tbody>`];
  for (let j = 0; j < NEXT_N; j++) {
    const p = final[j];
    const bars = tag("span", { class: "model", style: `width:${(model[j] * 100).toFixed(2)}%` }, "") +
      tag("span", { style: `width:${(p * 100).toFixed(2)}%` }, "");
    const td = (inner, attrs) => tag("td", attrs || {}, inner);
    const cells = [
      td(j + 1), td(esc(vocab(ids[j])), { class: "tok" }), td(ids[j]), td(logits[j].toFixed(3)), td(pct(model[j])),
      td(p > 0 ? pct(p) : "—"), td(bars, { class: "bar" }),
    ];
    parts.push(tag("tr", { class: p > 0 ? "" : "cut", "data-id": ids[j], "data-p": p }, cells.join("")));
  }
  parts.push("</tbody>");
  table.innerHTML = parts.join("");
}

// --- the model ----------------------------------------------------------------------------------

function buildModel() {
  const s = D.shape;
  const rows = [
    ["family", s.family], ["layers", s.layers], ["d_model", s.d_model], ["heads", s.heads], ["kv_heads", s.kv_heads],
    ["head_dim", s.head_dim], ["d_ff", s.d_ff], ["vocab", s.vocab], ["context", s.context], ["norm", s.norm],
    ["mlp", s.mlp], ["positions", s.positions], ["tied", s.tied ? t("yes") : t("no")],
  ];
  const num = (v) => (typeof v === "number" ? v.toLocaleString("en-US") : v);
  const parts = rows.map(([k, v]) => `<tr><th>${esc(t(k))}</th><td class="num">${esc(num(v))}</td><td></td></tr>`);
  parts.push(`<tr><th>${esc(t("params_exact"))}</th><td class="num" id="params-exact">${num(D.params.exact)}</td>` +
    `<td class="why">${esc(t("why_exact"))}</td></tr>`);
  parts.push(`<tr><th>${esc(t("params_tally"))}</th><td class="num">${num(D.params.tally)}</td>` +
    `<td class="why">${esc(t("why_tally"))}</td></tr>`);
  document.getElementById("shape").innerHTML = parts.join("");
  const stored = document.getElementById("stored");
  for (const line of [
    t("stored_attn", { q: Q }), t("stored_lens", { k: LENS_K, q: Q }), t("stored_next", { n: NEXT_N }),
    t("stored_limit", { t: D.limits.tokens }),
  ]) {
    stored.appendChild(el("li", {}, line));
  }
  const list = document.getElementById("token-list");
  D.tokens.forEach((tok, i) => {
    const chip = el("span", { class: "t", "data-id": tok.id }, tok.label);
    chip.appendChild(el("small", {}, `#${i} id ${tok.id}`));
    list.appendChild(chip);
  });
}

// --- the page -----------------------------------------------------------------------------------

function main() {
  document.getElementById("title").textContent = clip(D.text, 90);
  document.getElementById("subtitle").textContent = t("subtitle", { model: D.model, n: T, layers: L, heads: H });
  for (const e of document.querySelectorAll("[data-t]")) e.textContent = t(e.dataset.t, { k: LENS_K });
  buildTabs();
  buildAttention();
  buildLens();
  buildNext();
  buildModel();
  document.body.dataset.ready = "1";
}

main();
