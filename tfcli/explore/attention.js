"use strict";
// The attention tab of the page of `tfcli explore`: the head view, one head's heatmap, every head small.
// It draws with page.js's helpers and arrays (t, tag, weight, labels...); page.py puts it before page.js,
// whose main() builds it once everything is defined.

// --- attention ----------------------------------------------------------------------------------

const state = { layer: 0, head: 0, all: false, focus: null };

function buildAttention() {
  const layer = document.getElementById("layer");
  for (let l = 0; l < L; l++) layer.appendChild(el("option", { value: l }, String(l)));
  const head = document.getElementById("head");
  const gqa = D.shape.kv_heads !== H;
  for (let h = 0; h < H; h++) {
    head.appendChild(el("option", { value: h },
      gqa ? t("head_option_kv", { h, k: kvOf(h) }) : t("head_option", { h })));
  }
  layer.addEventListener("change", () => { state.layer = +layer.value; drawAttention(); });
  head.addEventListener("change", () => { state.head = +head.value; drawAttention(); });
  const all = document.getElementById("allheads");
  all.addEventListener("change", () => { state.all = all.checked; drawHeadView(); });
  document.getElementById("gqa").textContent = gqa
    ? t("gqa", {
      h: H, hkv: D.shape.kv_heads,
      groups: D.kv_groups.map((g, k) => t("gqa_group", { list: g.join(", "), k })).join("; "),
    })
    : t("no_gqa");
  drawAttention();
}

function drawAttention() {
  document.getElementById("layer").value = state.layer;
  document.getElementById("head").value = state.head;
  drawHeadView();
  drawHeatmap();
  drawThumbs();
}

function drawHeadView() {
  const box = document.getElementById("headview");
  const row = 20, top = 24, width = 420, lx = 132, rx = 248;
  const height = top + row * T + 8;
  const heads = state.all ? [...Array(H).keys()] : [state.head];
  const frame = {
    id: "headview-svg", tabindex: -1, width, height, viewBox: `0 0 ${width} ${height}`,
    "data-layer": state.layer, "data-heads": heads.join(","),
  };
  const parts = [];
  parts.push(tag("text", { x: lx, y: 14, "text-anchor": "end", "font-weight": 600 },
    `${esc(t("layer"))} ${state.layer}`));
  const which = heads.length === 1 ? t("head_option", { h: heads[0] }) : t("all_heads", { n: H });
  parts.push(tag("text", { x: rx, y: 14, "font-weight": 600 }, esc(which)));
  for (const h of heads) {
    for (let q = 0; q < T; q++) {
      for (let k = 0; k <= q; k++) {
        const w = weight(state.layer, h, q, k);
        if (w < LINE_MIN) continue;
        const y1 = top + q * row + row / 2 - 4, y2 = top + k * row + row / 2 - 4;
        parts.push(tag("line", {
          class: "w", x1: lx + 6, y1, x2: rx - 6, y2,
          stroke: headColour(h), "stroke-width": 2, "stroke-opacity": w.toFixed(4),
          "data-h": h, "data-q": q, "data-k": k, "data-w": w,
        }));
      }
    }
  }
  for (let i = 0; i < T; i++) {
    const y = top + i * row + row / 2;
    const label = esc(clip(labels[i], 14));
    // The queries (left) are one tab stop: the arrow keys move between them.
    parts.push(tag("g", { class: "tok", tabindex: i === 0 ? 0 : -1, role: "button", "data-side": "q", "data-i": i,
      "aria-label": `${labels[i]} #${i}` },
      tag("rect", { x: 0, y: y - 14, width: lx + 4, height: row - 2 }) +
      tag("text", { x: lx, y, "text-anchor": "end" }, label)));
    parts.push(tag("g", { class: "tok", tabindex: -1, "data-side": "k", "data-i": i },
      tag("rect", { x: rx - 4, y: y - 14, width: width - rx + 4, height: row - 2 }) + tag("text", { x: rx, y }, label) +
      tag("text", { class: "wv", x: width - 2, y, "text-anchor": "end" }, "")));
  }
  parts.push(tag("text", { x: width / 2, y: height - 1, "text-anchor": "middle", "font-size": 10, fill: "#8a90a0" },
    esc(t("lines_cut", { w: LINE_MIN }))));
  box.innerHTML = tag("svg", frame, parts.join(""));
  const legend = document.getElementById("legend");
  legend.innerHTML = heads
    .map((h) => tag("span", {}, tag("span", { class: "swatch", style: `background:${headColour(h)}` }, "") +
      esc(t("head_option", { h }))))
    .join(" ");
  const svg = box.firstChild;
  const over = (e) => {
    const g = e.target.closest(".tok");
    if (g) isolate(svg, g.dataset.side, +g.dataset.i);
  };
  svg.addEventListener("mouseover", over);
  svg.addEventListener("focusin", over);
  svg.addEventListener("mouseleave", () => isolate(svg, null));
  svg.addEventListener("focusout", () => isolate(svg, null));
  svg.addEventListener("keydown", (e) => {
    const g = e.target.closest(".tok");
    if (!g || (e.key !== "ArrowDown" && e.key !== "ArrowUp")) return;
    e.preventDefault();
    const i = Math.max(0, Math.min(T - 1, +g.dataset.i + (e.key === "ArrowDown" ? 1 : -1)));
    svg.querySelector(`.tok[data-side="q"][data-i="${i}"]`).focus();
  });
}

/** Show only the lines of token i's row (side q: what it looks at) or column (side k: who looks at it). */
function isolate(svg, side, i) {
  const attr = side === "q" ? "q" : "k";
  for (const line of svg.querySelectorAll("line.w")) {
    line.style.display = side === null || +line.dataset[attr] === i ? "" : "none";
  }
  for (const g of svg.querySelectorAll(".tok")) {
    g.classList.remove("on", "off", "linked");
    const value = g.querySelector(".wv");
    if (value) value.textContent = "";
    if (side === null) continue;
    const mine = g.dataset.side === side && +g.dataset.i === i;
    const linked = g.dataset.side !== side && (side === "q" ? +g.dataset.i <= i : +g.dataset.i >= i);
    g.classList.add(mine ? "on" : linked ? "linked" : "off");
    if (value && linked && side === "q" && !state.all)
      value.textContent = weight(state.layer, state.head, i, +g.dataset.i).toFixed(3);
  }
  svg.dataset.focus = side === null ? "" : `${side}${i}`;
}

function heatColour(w) {
  // white to a deep blue; a square root so that small weights still show
  const s = Math.sqrt(w);
  return `rgb(${Math.round(255 - 219 * s)},${Math.round(255 - 168 * s)},${Math.round(255 - 58 * s)})`;
}

function drawHeatmap() {
  const box = document.getElementById("heatmap");
  const cell = Math.max(4, Math.min(22, Math.floor(560 / T)));
  // The axes name the tokens (clipped; the readout gives them whole): rows on the left, columns written upwards.
  const padL = 64, padT = 58, width = padL + cell * T + 2, height = padT + cell * T + 2;
  const l = state.layer, h = state.head;
  const frame = {
    id: "heatmap-svg", width, height, viewBox: `0 0 ${width} ${height}`, tabindex: 0,
    "data-layer": l, "data-head": h, "aria-label": t("heatmap_caption"),
  };
  const parts = [];
  const step = [1, 2, 4, 5, 8, 10, 16, 20, 32, 50].find((s) => s * cell >= 20) || 64; // labels 20 px apart at least
  for (let i = 0; i < T; i += step) {
    const name = esc(clip(labels[i], 8));
    const x = padL + i * cell + cell / 2 + 4, y = padT + i * cell + cell / 2 + 4;
    parts.push(`<text x="${padL - 3}" y="${y}" text-anchor="end" font-size="10" fill="#8a90a0">` +
      `<title>${i} ${esc(labels[i])}</title>${name}</text>`);
    parts.push(`<text x="${x}" y="${padT - 4}" transform="rotate(-90 ${x} ${padT - 4})" text-anchor="start" ` +
      `font-size="10" fill="#8a90a0"><title>${i} ${esc(labels[i])}</title>${name}</text>`);
  }
  for (let q = 0; q < T; q++) {
    for (let k = 0; k <= q; k++) {
      const w = weight(l, h, q, k);
      parts.push(tag("rect", {
        class: "c", x: padL + k * cell, y: padT + q * cell, width: cell, height: cell, fill: heatColour(w),
        "data-q": q, "data-k": k, "data-w": w,
      }));
    }
  }
  parts.push(tag("rect", {
    id: "heat-cur", x: 0, y: 0, width: cell, height: cell, fill: "none", stroke: "#f0a500", "stroke-width": 2,
    visibility: "hidden",
  }));
  box.innerHTML = tag("svg", frame, parts.join(""));
  const svg = box.firstChild;
  const readout = document.getElementById("readout");
  readout.textContent = t("readout_hint");
  let cur = [T - 1, 0];
  const show = (q, k) => {
    cur = [q, k];
    const w = weight(l, h, q, k);
    readout.textContent = t("readout",
      { q, ql: JSON.stringify(labels[q]), k, kl: JSON.stringify(labels[k]), w: w.toFixed(4) });
    readout.dataset.q = q; readout.dataset.k = k; readout.dataset.w = w;
    const mark = svg.querySelector("#heat-cur");
    mark.setAttribute("x", padL + k * cell);
    mark.setAttribute("y", padT + q * cell);
    mark.setAttribute("visibility", "visible");
  };
  svg.addEventListener("mouseover", (e) => {
    if (e.target.classList.contains("c")) show(+e.target.dataset.q, +e.target.dataset.k);
  });
  svg.addEventListener("focus", () => show(cur[0], cur[1]));
  svg.addEventListener("keydown", (e) => {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!moves[e.key]) return;
    e.preventDefault();
    let q = Math.max(0, Math.min(T - 1, cur[0] + moves[e.key][0]));
    let k = Math.max(0, Math.min(q, cur[1] + moves[e.key][1]));
    show(q, k);
  });
}

function drawThumbs() {
  const box = document.getElementById("thumbs");
  document.getElementById("thumbs-title").textContent = t("thumbs_title", { n: H, l: state.layer });
  box.innerHTML = "";
  const gqa = D.shape.kv_heads !== H;
  for (let h = 0; h < H; h++) {
    const b = el("button", { type: "button", "aria-pressed": String(h === state.head), "data-head": h });
    const c = el("canvas", { width: T, height: T });
    const ctx = c.getContext("2d");
    const img = ctx.createImageData(T, T);
    for (let q = 0; q < T; q++) {
      for (let k = 0; k < T; k++) {
        const o = (q * T + k) * 4;
        if (k > q) { img.data[o] = 243; img.data[o + 1] = 244; img.data[o + 2] = 248; img.data[o + 3] = 255; continue; }
        const s = Math.sqrt(weight(state.layer, h, q, k));
        img.data[o] = 255 - 219 * s; img.data[o + 1] = 255 - 168 * s; img.data[o + 2] = 255 - 58 * s;
        img.data[o + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    b.appendChild(c);
    const cap = el("span");
    cap.appendChild(el("span", { class: "swatch", style: `background:${headColour(h)}` }));
    cap.appendChild(document.createTextNode(gqa ? t("head_option_kv", { h, k: kvOf(h) }) : t("head_option", { h })));
    b.appendChild(cap);
    b.addEventListener("click", () => {
      state.head = h;
      drawAttention();
      document.querySelector(`#thumbs button[data-head="${h}"]`).focus();
    });
    box.appendChild(b);
  }
}
