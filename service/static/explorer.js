// The explorer page: the form <-> the query string, POST /tiling/explain for the numbers, POST
// /tiling/plot/{picture} for the four pictures (inline SVG drawn by the server). Plain JavaScript, no
// framework, nothing fetched from outside.
"use strict";

const FIELDS = ["soc", "shape", "dtype", "reduction", "weight", "pos_weight", "wrt", "mode"];
const KNOBS = ["block_bytes", "buffer_num", "tile_bytes", "core_num"];
const PICTURES = ["core_map", "ub", "timeline", "landscape"];
const $ = (id) => document.getElementById(id);

function fromQuery() {
  const q = new URLSearchParams(location.search);
  for (const name of FIELDS.concat(KNOBS)) {
    if (!q.has(name)) continue;
    const el = $(name);
    if (el.type === "checkbox") el.checked = q.get(name) !== "false";
    else el.value = q.get(name);
  }
}

function query() {
  const q = new URLSearchParams();
  for (const name of FIELDS.concat(KNOBS)) {
    const el = $(name);
    if (el.type === "checkbox") q.set(name, el.checked ? "true" : "false");
    else if (el.value.trim() !== "") q.set(name, el.value.trim());
  }
  return q;
}

// A value the way the user typed it: an integer where it is one, else the text (the API says what is wrong).
function number(text) {
  const t = text.trim();
  return /^-?\d+$/.test(t) ? Number(t) : t;
}

// weight as the API takes it: true / false, a form name, or a shape ("1000", "4096,1", "[]").
function weightOf(text) {
  const t = text.trim();
  if (t === "true" || t === "false") return t === "true";
  if (t === "[]") return [];
  if (/^[\d\s,x\[\]-]+$/.test(t)) return t.replace(/[\[\]]/g, "").split(/[,x ]+/).filter((d) => d !== "").map(number);
  return t === "" ? true : t;
}

function body() {
  const shape = $("shape").value.trim();
  const req = {
    soc: $("soc").value,
    shape: shape === "" ? [] : shape.split(/[,x ]+/).map(number),
    dtype: $("dtype").value,
    reduction: $("reduction").value,
    weight: weightOf($("weight").value),
    pos_weight: $("pos_weight").value,
    wrt: $("wrt").value,
    mode: $("mode").value,
  };
  const params = {};
  for (const k of KNOBS) if ($(k).value.trim() !== "") params[k] = number($(k).value);
  if (Object.keys(params).length) req.params = params;
  return req;
}

function clearErrors() {
  for (const el of document.querySelectorAll(".field")) el.classList.remove("bad");
  for (const el of document.querySelectorAll(".error")) el.textContent = "";
}

// Each error of a 422 next to its field: loc is ["body", field, ...] or ["body", "params", knob].
function showErrors(detail) {
  for (const item of Array.isArray(detail) ? detail : [{ loc: ["body"], msg: String(detail) }]) {
    const loc = (item.loc || []).filter((x) => x !== "body" && x !== "params" && typeof x === "string");
    const field = loc.find((x) => $(x + "-error"));
    const target = field ? $(field + "-error") : $("form-error");
    target.textContent += (target.textContent ? " " : "") + item.msg;
    if (field) document.querySelector(`.field[data-field="${field}"]`).classList.add("bad");
  }
}

function show(doc) {
  const a = doc.answer, e = doc.explain;
  $("source").textContent = a.source;
  $("block_dim").textContent = a.block_dim;
  for (const k of KNOBS) $(k + "_out").textContent = a.params[k];
  $("predicted_us").textContent = a.predicted_us.toFixed(4);
  const band = a.predicted_interval_us;
  $("predicted_interval").textContent =
    ` (expected ${band[0].toFixed(2)} to ${band[1].toFixed(2)} µs${a.provenance.device_fitted ? ", device-fitted" : ""})`;
  $("predicted_interval").title = a.predicted_interval_basis;
  $("roofline_us").textContent = a.roofline_us.toFixed(4);
  $("seed_default_us").textContent = e.seed_default_us.toFixed(4);
  $("bottleneck").textContent = e.bottleneck;
  $("notes").textContent = e.notes.join("; ");
  $("result").hidden = false;
}

// POST as the service asks: past this client's share (429) or the server's (503), again after its
// Retry-After (up to 10 times); null once the view has changed (the answer is not wanted any more)
async function post(url, req, generation) {
  for (let attempt = 0; ; attempt++) {
    const r = await fetch(url, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(req),
    });
    if (generation !== current) return null;
    if (![429, 503].includes(r.status) || attempt >= 10) return r;
    const wait = Number(r.headers.get("retry-after")) || 1;
    await new Promise((done) => setTimeout(done, 1000 * wait));
    if (generation !== current) return null;
  }
}

async function picture(name, req, generation) {
  const fig = $("pic-" + name).querySelector(".pic");
  fig.removeAttribute("data-rendered");
  const r = await post(`/tiling/plot/${name}?format=svg`, req, generation);
  if (r === null) return;
  if (!r.ok) { fig.textContent = `no picture (${r.status})`; return; }
  const svg = await r.text();
  fig.innerHTML = svg.slice(svg.indexOf("<svg"));  // the server's matplotlib SVG, without its XML prologue
  fig.setAttribute("data-rendered", "1");
}

let current = 0;

async function submit(ev) {
  if (ev) ev.preventDefault();
  const generation = ++current;
  clearErrors();
  const q = query();
  history.replaceState(null, "", "?" + q.toString());
  $("permalink").href = "/explorer?" + q.toString();
  $("status").textContent = "…";
  const req = body();
  let r;
  try {
    r = await post("/tiling/explain", req, generation);
  } catch (err) {
    $("form-error").textContent = "the service did not answer: " + err;
    $("status").textContent = "";
    return;
  }
  if (r === null) return;
  const doc = await r.json();
  if (generation !== current) return;
  $("status").textContent = "";
  if (!r.ok) {
    $("result").hidden = true;
    showErrors(doc.detail);
    return;
  }
  show(doc);
  document.body.setAttribute("data-answered", String(generation));
  await Promise.all(PICTURES.map((p) => picture(p, req, generation)));
}

async function socs() {
  try {
    const r = await fetch("/socs");
    if (!r.ok) return;
    const list = await r.json();
    const names = (list.socs || list).map((s) => s.name || s);
    const sel = $("soc"), keep = sel.value;
    sel.innerHTML = "";
    for (const n of names) sel.add(new Option(n, n));
    sel.value = names.includes(keep) ? keep : names[0];
  } catch (err) { /* keep the default SoC */ }
}

document.addEventListener("DOMContentLoaded", async () => {
  await socs();
  fromQuery();
  $("request").addEventListener("submit", submit);
  submit();
});
