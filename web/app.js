"use strict";
// attnkit's page: the translation with an interactive attention heatmap, and the playground.

function viridis(t) {
  const stops = [[68, 1, 84], [72, 36, 117], [65, 68, 135], [53, 95, 141], [42, 120, 142],
                 [33, 145, 140], [34, 168, 132], [122, 209, 81], [253, 231, 37]];
  t = Math.min(1, Math.max(0, t || 0)) * 8;
  const i = Math.min(7, Math.floor(t)), f = t - i;
  const c = stops[i].map((a, k) => Math.round(a + f * (stops[i + 1][k] - a)));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

async function post(url, body) {
  const res = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  const data = await res.json();
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

// Rows: target tokens; columns: source tokens. Hovering a label lights up what it attends to.
function drawHeatmap(container, sourceTokens, targetTokens, attention) {
  container.innerHTML = "";
  container.style.gridTemplateColumns = `auto repeat(${sourceTokens.length}, 34px)`;
  const cells = [];
  const corner = document.createElement("div");
  container.appendChild(corner);
  const colLabels = sourceTokens.map((tok, j) => {
    const el = document.createElement("div");
    el.className = "label col-label";
    el.textContent = tok;
    el.dataset.col = j;
    container.appendChild(el);
    return el;
  });
  const rowLabels = [];
  targetTokens.forEach((tok, i) => {
    const label = document.createElement("div");
    label.className = "label row-label";
    label.textContent = tok;
    label.dataset.row = i;
    container.appendChild(label);
    rowLabels.push(label);
    cells.push(sourceTokens.map((_, j) => {
      const w = (attention[i] || [])[j] || 0;
      const cell = document.createElement("div");
      cell.className = "cell";
      cell.style.background = viridis(w);
      cell.dataset.row = i;
      cell.dataset.col = j;
      cell.dataset.weight = w;
      cell.title = `${tok} ← ${sourceTokens[j]}: ${w.toFixed(4)}`;
      container.appendChild(cell);
      return cell;
    }));
  });
  const clear = () => container.querySelectorAll(".active").forEach(el => el.classList.remove("active"));
  // A strong link (>= half of the row's or column's maximum) is highlighted.
  const light = (list, partner) => {
    const max = Math.max(...list.map(c => +c.dataset.weight));
    list.forEach(c => {
      if (+c.dataset.weight >= 0.5 * max && max > 0) {
        c.classList.add("active");
        partner(c).classList.add("active");
      }
    });
  };
  rowLabels.forEach((label, i) => {
    label.addEventListener("mouseenter", () => { clear(); label.classList.add("active"); light(cells[i], c => colLabels[+c.dataset.col]); });
    label.addEventListener("mouseleave", clear);
  });
  colLabels.forEach((label, j) => {
    label.addEventListener("mouseenter", () => { clear(); label.classList.add("active"); light(cells.map(r => r[j]), c => rowLabels[+c.dataset.row]); });
    label.addEventListener("mouseleave", clear);
  });
}

// The maps a translation offers: the attention its search kept and, from a Transformer, every
// layer and head of the cross-attention and the self-attention of encoder and decoder.
function attentionMaps(r) {
  // attention_rows labels every row, the end-of-sentence step's (</s>) included.
  const maps = [{name: "cross-attention (what the search used)", rows: r.attention_rows,
                 cols: r.source_tokens, weights: r.attention}];
  const layers = r.attention_layers;
  if (!layers) return maps;
  const mean = heads => heads[0].map((row, i) => row.map((_, j) =>
    heads.reduce((sum, h) => sum + h[i][j], 0) / heads.length));
  layers.cross.forEach((heads, l) => {
    maps.push({name: `cross, layer ${l + 1}, mean of heads`, rows: r.attention_rows,
               cols: r.source_tokens, weights: mean(heads)});
    heads.forEach((w, h) => maps.push({name: `cross, layer ${l + 1}, head ${h + 1}`,
                                       rows: r.attention_rows, cols: r.source_tokens, weights: w}));
  });
  layers.encoder_self.forEach((heads, l) => maps.push({name: `encoder self, layer ${l + 1}`,
    rows: r.source_tokens, cols: r.source_tokens, weights: mean(heads)}));
  layers.decoder_self.forEach((heads, l) => maps.push({name: `decoder self, layer ${l + 1}`,
    rows: r.attention_rows, cols: layers.decoder_inputs, weights: mean(heads)}));
  return maps;
}

function showAttention(r) {
  const maps = attentionMaps(r);
  const picker = document.getElementById("attention-map");
  picker.innerHTML = "";
  maps.forEach((m, i) => picker.add(new Option(m.name, i)));
  picker.hidden = maps.length < 2;  // a GRU model has one attention
  const draw = () => {
    const m = maps[+picker.value || 0];
    drawHeatmap(document.getElementById("heatmap"), m.cols, m.rows, m.weights);
  };
  picker.onchange = draw;
  draw();
}

document.getElementById("translate-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("translate-error");
  error.textContent = "";
  try {
    const r = await post("/api/translate", {
      text: document.getElementById("source").value,
      beam: +document.getElementById("beam").value,
    });
    document.getElementById("translation").textContent = r.translation;
    showAttention(r);
  } catch (e) {
    error.textContent = e.message;
  }
});

// The catalog: POST its bytes to /api/po, list the filled entries, and show the attention behind
// the selected one (the line as the model read it, placeholders and accelerators masked).
function showEntry(answer, entry, row) {
  document.querySelectorAll("#po-entries tr.selected").forEach(tr => tr.classList.remove("selected"));
  row.classList.add("selected");
  const input = document.getElementById("po-input");
  const picker = document.getElementById("po-segment");
  const heatmap = document.getElementById("po-heatmap");
  heatmap.innerHTML = "";
  picker.innerHTML = "";
  picker.hidden = true;
  if (entry.origin !== "model") {
    input.textContent = entry.origin === "memory" ? `From translation memory (${entry.memory}): no model, no attention.`
                                                  : "Nothing to translate: copied from the msgid.";
    return;
  }
  const draw = () => {
    const s = answer.segments[entry.segments[+picker.value || 0]];
    input.textContent = `The model read: ${s.input}  →  ${s.output.translation}`;
    drawHeatmap(heatmap, s.output.source_tokens, s.output.attention_rows, s.output.attention);
  };
  entry.segments.forEach((s, i) => picker.add(new Option(`line ${i + 1}: ${answer.segments[s].input}`, i)));
  picker.hidden = entry.segments.length < 2;
  picker.onchange = draw;
  draw();
}

function showCatalog(answer, name) {
  const r = answer.report;
  document.getElementById("po-summary").textContent =
    `${r.entries} messages: ${r.translated} already translated, ${r.memory} from translation memory, ` +
    `${r.model} by the model, ${r.copied} copied; placeholders, markup and accelerators intact in ` +
    `${r.intact} of ${r.memory + r.model + r.copied}. Suggestions are marked fuzzy.`;
  const table = document.getElementById("po-entries");
  table.innerHTML = "";
  answer.entries.forEach((e, i) => {
    const tr = document.createElement("tr");
    tr.dataset.entry = i;
    // A calibrated model's confidence: the expected chrF2 of the suggestion, in three bands.
    const known = typeof e.confidence === "number";
    if (known) tr.classList.add(e.confidence < 0.4 ? "confidence-low" : e.confidence < 0.6 ? "confidence-mid" : "confidence-high");
    const origin = known ? `${e.origin}, confidence ${e.confidence.toFixed(2)}` : e.origin;
    const cells = [e.msgctxt ? `[${e.msgctxt}] ${e.msgid}` : e.msgid, e.msgstr.join("\n"), origin];
    cells.forEach((text, k) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (k === 2) td.className = "origin";
      if (k === 1 && !e.intact) td.className = "damaged";
      tr.appendChild(td);
    });
    tr.addEventListener("click", () => showEntry(answer, e, tr));
    table.appendChild(tr);
  });
  const bytes = Uint8Array.from(atob(answer.catalog_base64), c => c.charCodeAt(0));
  const link = document.getElementById("po-download");
  if (link.href) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(new Blob([bytes], {type: "text/x-gettext-translation"}));
  link.download = name.replace(/\.pot$/, ".po");
  link.textContent = `Download ${link.download}`;
  link.hidden = false;
  const first = table.querySelector("tr");
  if (first) first.click();
}

document.getElementById("po-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("po-error");
  error.textContent = "";
  const file = document.getElementById("po-file").files[0];
  if (!file) { error.textContent = "Choose a .po or .pot file first."; return; }
  const button = document.getElementById("po-button");
  button.disabled = true;
  document.getElementById("po-summary").textContent = `Translating ${file.name}…`;
  try {
    const query = new URLSearchParams({name: file.name, beam: document.getElementById("po-beam").value});
    const lang = document.getElementById("po-lang").value.trim();
    if (lang) query.set("lang", lang);
    const res = await fetch(`/api/po?${query}`, {method: "POST", body: await file.arrayBuffer(),
                                                  headers: {"Content-Type": "text/x-gettext-translation"}});
    const answer = await res.json();
    if (!res.ok) throw new Error(answer.error || res.statusText);
    showCatalog(answer, file.name);
  } catch (e) {
    document.getElementById("po-summary").textContent = "";
    error.textContent = e.message;
  } finally {
    button.disabled = false;
  }
});

function fillTable(table, rows) {
  table.innerHTML = "";
  rows.forEach(row => {
    const tr = document.createElement("tr");
    row.forEach(v => {
      const td = document.createElement("td");
      td.textContent = v.toFixed(4);
      tr.appendChild(td);
    });
    table.appendChild(tr);
  });
}

document.getElementById("attend-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = document.getElementById("attend-error");
  error.textContent = "";
  try {
    const mechanism = document.getElementById("mechanism").value;
    const body = {mechanism, score: document.getElementById("score").value};
    const parse = id => JSON.parse(document.getElementById(id).value);
    if (mechanism === "self") body.x = parse("q");
    else Object.assign(body, {q: parse("q"), k: parse("k"), v: parse("v")});
    const r = await post("/api/attend", body);
    fillTable(document.getElementById("playground-weights"), r.weights);
    fillTable(document.getElementById("playground-output"), r.output);
  } catch (e) {
    error.textContent = e.message;
  }
});

// Self attention is the notes' softmax(X Xᵀ/√d) X: switch the score with the mechanism.
document.getElementById("mechanism").addEventListener("change", (event) => {
  document.getElementById("score").value = event.target.value === "self" ? "scaled-dot" : "dot";
  if (event.target.value === "self") document.getElementById("q").value = "[[1, 0, 0], [0, 1, 0], [0, 0, 1]]";
});
