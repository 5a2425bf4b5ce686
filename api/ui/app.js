// wahook's dashboard: plain JavaScript over /api/v1, charts by uPlot
// (vendor/). Every number comes from the API with the token of the login
// form, kept in sessionStorage; the page holds no data of its own.
"use strict";

const TOKEN_KEY = "wahook-token";
// FILTERS_TOKEN_KEY holds a tag of the last token signed in with in this
// tab: a sign-in with another token drops the filters in the location,
// which were another tenant's (its numbers, its WABAs).
const FILTERS_TOKEN_KEY = "wahook-filters-token";

// tokenTag tells tokens apart (FNV-1a, 32 bits): it is no secret, and the
// token itself is in the same storage while signed in.
function tokenTag(token) {
  let h = 0x811c9dc5;
  for (let i = 0; i < token.length; i++) { h ^= token.charCodeAt(i); h = Math.imul(h, 0x01000193) >>> 0; }
  return h.toString(16);
}
const VERDICTS = ["stop", "skip_country", "pause", "slow_down", "wait_recipient", "not_rate_limit"];
const VERDICT_COLOR = { slow_down: "#f59e0b", wait_recipient: "#8b5cf6", pause: "#3b82f6", stop: "#dc2626", skip_country: "#be185d", not_rate_limit: "#94a3b8", "": "#94a3b8" };
const CLASS_VERDICT = {};
const $ = (sel, el) => (el || document).querySelector(sel);
const view = () => $("#view");

// Requests made, for the browser tests: the path and query of each.
window.wahookRequests = [];
let charts = [];
let liveAbort = null;
// routeAbort ends the requests of the page being drawn when another
// navigation starts, and routeGen tells a superseded render: a slow answer
// must never draw over the page shown now.
let routeAbort = new AbortController();
let routeGen = 0;

function esc(s) {
  return String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function fmt(n) { return n == null ? "–" : Number(n).toLocaleString("en-US", { maximumFractionDigits: 2 }); }
function pct(x) { return x == null ? "–" : (100 * x).toFixed(1) + "%"; }
function secs(x) { return x == null ? "–" : x < 120 ? x.toFixed(0) + " s" : (x / 60).toFixed(1) + " min"; }
function badge(v) { return v ? `<span class="badge v-${esc(v)}">${esc(v)}</span>` : ""; }

class AuthError extends Error {}

// api asks the API for path with the signed-in token, as part of the page
// being drawn (its requests end when another navigation starts) unless
// signal says otherwise.
async function api(path, signal) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  window.wahookRequests.push(path);
  const r = await fetch(path, { headers: { Authorization: "Bearer " + token }, signal: signal || routeAbort.signal });
  if (r.status === 401) { throw new AuthError("token refused"); }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) {
    const e = new Error((body.error && body.error.message) || r.statusText);
    e.status = r.status; e.code = body.error && body.error.code;
    throw e;
  }
  return body;
}

// ---- range and parameters ----

function range() {
  const hp = hashParams().params;
  if (hp.get("from") && hp.get("to")) return { from: Number(hp.get("from")), to: Number(hp.get("to")) };
  const p = $("#range-preset").value;
  const now = Math.floor(Date.now() / 1000);
  if (p === "custom") {
    const f = Date.parse($("#range-from").value + "Z"), t = Date.parse($("#range-to").value + "Z");
    if (f && t && f < t) return { from: f / 1000, to: t / 1000 };
    throw new Error("Choose a custom range whose start is before its end (UTC).");
  }
  const span = { "1h": 3600, "6h": 21600, "24h": 86400, "7d": 604800, "30d": 2592000 }[p] || 86400;
  const to = Math.floor(now / 60) * 60 + 60;
  return { from: to - span, to };
}
function autoStep(r) { const s = r.to - r.from; return s <= 6 * 3600 ? "1m" : s <= 8 * 86400 ? "1h" : "1d"; }
function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    u.set(k, String(v));
  }
  return u.toString();
}
function hashParams() {
  const h = location.hash.slice(1);
  const i = h.indexOf("?");
  return { path: i < 0 ? h : h.slice(0, i), params: new URLSearchParams(i < 0 ? "" : h.slice(i + 1)) };
}

// ---- charts ----

function clearCharts() { charts.forEach((c) => c.destroy()); charts = []; }
// The charts' times are UTC, as the range's inputs, the API's buckets and
// the tables' stamps.
const utcDate = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
function chartWidth(el) { return Math.max(320, el.clientWidth - 4); }

// stacked draws series stacked (each the sum of it and those below it),
// with the tooltip's values the series' own.
function stacked(el, title, xs, series, opts) {
  opts = opts || {};
  const sums = [];
  let acc = xs.map(() => 0);
  for (const s of series) { acc = acc.map((a, i) => a + (s.values[i] || 0)); sums.push(acc); }
  const data = [xs];
  const sers = [{}];
  // Top first, so that each lower area paints over the one above it.
  for (let k = series.length - 1; k >= 0; k--) {
    const s = series[k];
    data.push(sums[k]);
    sers.push({ label: s.label, stroke: s.color, fill: s.color + "cc", width: 1,
      value: (u, v, si, i) => (i == null ? "–" : fmt(s.values[i])) });
  }
  for (const l of opts.lines || []) {
    data.push(l.values);
    sers.push({ label: l.label, stroke: l.color, width: 2, dash: [6, 4] });
  }
  const u = new uPlot({
    title, width: chartWidth(el), height: opts.height || 260,
    series: sers, scales: { x: { time: true } }, tzDate: utcDate,
    axes: [{}, { label: opts.yLabel || "", size: 60 }],
    cursor: { drag: { x: true, y: false } },
  }, data, el);
  charts.push(u);
  el.dataset.points = String(xs.length);
  return u;
}

function bars(el, title, labels, series) {
  // Side by side: each label's slot holds one bar per series, at its own x.
  const S = series.length, w = 0.8 / S;
  const xs = [];
  labels.forEach((_, i) => { for (let k = 0; k < S; k++) xs.push(i + (k - (S - 1) / 2) * w); });
  const data = [xs].concat(series.map((s, k) => xs.map((_, j) => (j % S === k ? s.values[Math.floor(j / S)] : null))));
  const u = new uPlot({
    title, width: chartWidth(el), height: 260,
    scales: { x: { time: false, range: [-0.5, labels.length - 0.5] } },
    series: [{ label: "", value: (u, v) => (v == null ? "" : labels[Math.round(v)] || "") }].concat(series.map((s) => ({
      label: s.label, stroke: s.color, fill: s.color + "bb", width: 1,
      paths: uPlot.paths.bars({ size: [0.95, 80], align: 0 }),
      points: { show: false },
    }))),
    axes: [{ splits: () => labels.map((_, i) => i), values: (u, v) => v.map((i) => shorten(labels[i] || "")) }, { size: 60 }],
  }, data, el);
  charts.push(u);
  el.dataset.points = String(labels.length);
  return u;
}
function shorten(s) { return s.length > 14 ? s.slice(0, 13) + "…" : s || "(none)"; }

// timeline is the times of buckets from..to at step seconds.
function timeline(from, to, step) {
  const xs = [];
  for (let t = Math.floor(from / step) * step; t < to; t += step) xs.push(t);
  return xs;
}
function shade(hex, k) {
  const n = parseInt(hex.slice(1), 16);
  const f = 1 - 0.18 * k;
  const c = (v) => Math.max(0, Math.min(255, Math.round(v * f + (1 - f) * 40)));
  return "#" + [n >> 16, (n >> 8) & 255, n & 255].map((v) => c(v).toString(16).padStart(2, "0")).join("");
}

// ---- views ----

const VIEWS = {
  failures: renderFailures,
  numbers: renderNumbers,
  number: renderNumber,
  funnel: renderFunnel,
  live: renderLive,
  "dead-letters": renderDeadLetters,
};

async function route() {
  if (liveAbort) { liveAbort.abort(); liveAbort = null; }
  routeAbort.abort();
  routeAbort = new AbortController();
  const gen = ++routeGen;
  showLinkRange();
  clearCharts();
  const { path } = hashParams();
  const name = path.split("/")[0] || "failures";
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.view === (name === "number" ? "numbers" : name)));
  document.body.dataset.view = name;
  document.body.dataset.loaded = "";
  const fn = VIEWS[name] || renderFailures;
  // The page before is gone at once: a page still loading, or one that
  // fails, must not show the last page's tables as its own.
  view().innerHTML = `<p class="muted" id="view-loading">Loading…</p>`;
  const t0 = performance.now();
  try {
    await fn(path.split("/").slice(1).join("/"));
    if (gen !== routeGen) return;
    document.body.dataset.loadMs = String(Math.round(performance.now() - t0));
    // From the navigation's start, for the timing test (api/ui_timing_test.go).
    document.body.dataset.loadedAt = String(Math.round(performance.now()));
    document.body.dataset.loaded = name;
  } catch (e) {
    // A render another navigation superseded (its requests aborted, or its
    // page's elements gone) says nothing about the page shown now.
    if (gen !== routeGen) return;
    if (e instanceof AuthError) return logout("The token was refused.");
    document.getElementById("view-loading")?.remove();
    view().insertAdjacentHTML("beforeend", `<p class="error" id="view-error">${esc(e.status === 404 ? "Not found." : e.message)}</p>`);
    document.body.dataset.loaded = name + ":error";
  }
}

function filterState() {
  const { params } = hashParams();
  const o = {};
  for (const k of ["phone_number_id", "waba_id", "template", "campaign", "origin", "step"]) o[k] = params.get(k) || "";
  return o;
}
function setFilters(view, f) {
  const p = new URLSearchParams();
  const hp = hashParams().params;
  for (const k of ["from", "to"]) if (hp.get(k)) p.set(k, hp.get(k));
  for (const [k, v] of Object.entries(f)) if (v) p.set(k, v);
  const s = p.toString();
  location.hash = view + (s ? "?" + s : "");
}
const ORIGINS = { "": "", webhook: "status,value,inbound,history,call,echo", send_result: "send_result" };

async function renderFailures() {
  const f = filterState();
  const r = range();
  const step = f.step || autoStep(r);
  const base = { from: r.from, to: r.to, phone_number_id: f.phone_number_id, waba_id: f.waba_id, template: f.template, campaign: f.campaign, origin: ORIGINS[f.origin] || "" };
  view().innerHTML = `
  <h1>Failures</h1>
  <div class="card filters" id="failure-filters">
    <label>Number<input name="phone_number_id" value="${esc(f.phone_number_id)}" placeholder="phone number id"></label>
    <label>WABA<input name="waba_id" value="${esc(f.waba_id)}" placeholder="WABA id"></label>
    <label>Template<input name="template" value="${esc(f.template)}"></label>
    <label>Campaign<input name="campaign" value="${esc(f.campaign)}" title='Comma-separated; one with commas in double quotes, a quote in it doubled: "{""c"":""spring"",""wave"":2}"'></label>
    <label>Origin<select name="origin"><option value="">any</option><option value="webhook">webhook</option><option value="send_result">send result</option></select></label>
    <label>Step<select name="step"><option value="1m">1 minute</option><option value="1h">1 hour</option><option value="1d">1 day</option></select></label>
    <button id="apply-filters" type="button">Apply</button>
  </div>
  <div class="card reading">
    <p><b>Reading a wall of errors.</b> A wall of <b>130429</b> (rate limit hit: the number sends faster than its tier) means <b>queue</b>: slow down to the recommended rate and send the rest later; nothing is wrong with the list.</p>
    <p>A wall of <b>131048</b> (spam rate limit: too many recipients block or report the messages) means <b>stop</b> and fix the list: the recipients or the template, not the rate. Retrying makes it worse.</p>
  </div>
  <div class="card"><span class="stat">Failures<b id="failures-total">…</b></span><span class="stat">Codes<b id="failures-codes">…</b></span><span class="stat">Step<b>${esc(step)}</b></span></div>
  <div class="card"><div id="failures-chart" class="chart"></div></div>
  <div class="row">
    <div class="card"><h2>By code</h2><table id="failures-by-code"><thead><tr><th>code</th><th>title</th><th>class</th><th>verdict</th><th>retry can succeed</th><th class="num">failures</th><th class="num">share</th></tr></thead><tbody></tbody></table></div>
    <div class="card"><h2>By class</h2><div id="classes-chart" class="chart"></div><table id="failures-by-class"><thead><tr><th>class</th><th>verdict</th><th class="num">failures</th><th class="num">share</th></tr></thead><tbody></tbody></table></div>
  </div>`;
  const form = $("#failure-filters");
  form.querySelector("[name=origin]").value = f.origin;
  form.querySelector("[name=step]").value = step;
  // The step goes into the location only once the user chose one: an
  // automatic step stays automatic, and follows the next range (a filter
  // applied at a 1-minute step over an hour kept 1m for 30 days).
  const apply = (stepChosen) => {
    const o = {};
    form.querySelectorAll("input, select").forEach((el) => (o[el.name] = el.value.trim()));
    if (stepChosen !== true && !f.step) delete o.step;
    setFilters("failures", o);
  };
  $("#apply-filters").onclick = () => apply();
  form.querySelectorAll("input").forEach((el) => el.addEventListener("keydown", (e) => { if (e.key === "Enter") apply(); }));
  form.querySelector("[name=origin]").onchange = () => apply();
  form.querySelector("[name=step]").onchange = () => apply(true);

  // Two queries: the ranked codes, and the codes over time; the classes
  // are the codes' (each code has one class), summed here.
  const [overTime, byCode] = await Promise.all([
    api("/api/v1/failures?" + qs({ ...base, group_by: "code", step, limit: 10000 })),
    api("/api/v1/failures?" + qs({ ...base, group_by: "code" })),
  ]);
  const classOf = (row) => ({ class: row.class, verdict: row.verdict });
  const sumClasses = (rows, withTime) => {
    const m = new Map();
    for (const r of rows) {
      const k = (withTime ? r.time + "|" : "") + r.class;
      const o = m.get(k) || { ...classOf(r), time: r.time, failures: 0 };
      o.failures += r.failures;
      m.set(k, o);
    }
    return [...m.values()];
  };
  const byClass = { rows: sumClasses(byCode.rows, false).sort((a, b) => b.failures - a.failures) };
  byClass.rows.forEach((r) => (r.share = byCode.total ? r.failures / byCode.total : 0));
  const classTime = { rows: sumClasses(overTime.rows, true) };
  if (overTime.truncated) view().querySelector("#failures-chart").insertAdjacentHTML("beforebegin", `<p class="muted" id="failures-truncated">The chart holds the first 10,000 buckets and codes; choose a longer step for the whole range.</p>`);
  $("#failures-total").textContent = fmt(byCode.total);
  $("#failures-total").dataset.value = String(byCode.total);
  $("#failures-codes").textContent = String(byCode.rows.length);
  $("#failures-by-code tbody").innerHTML = byCode.rows.map((x) => `<tr data-code="${x.code}"><td>${x.code}</td><td>${esc(x.title)}</td><td>${esc(x.class)}</td><td>${badge(x.verdict)}</td><td>${x.retryable ? "yes" : "no"}</td><td class="num" data-value="${x.failures}">${fmt(x.failures)}</td><td class="num">${pct(x.share)}</td></tr>`).join("") || `<tr><td colspan="7" class="muted">No failures in this range.</td></tr>`;
  $("#failures-by-class tbody").innerHTML = byClass.rows.map((x) => `<tr data-class="${esc(x.class)}"><td>${esc(x.class)}</td><td>${badge(x.verdict)}</td><td class="num" data-value="${x.failures}">${fmt(x.failures)}</td><td class="num">${pct(x.share)}</td></tr>`).join("") || `<tr><td colspan="4" class="muted">None.</td></tr>`;

  const sec = { "1m": 60, "1h": 3600, "1d": 86400 }[step];
  const xs = timeline(r.from, r.to, sec);
  const idx = new Map(xs.map((t, i) => [t, i]));
  // Codes ranked by their total, coloured by verdict (shades within one).
  const codes = byCode.rows.slice(0, 12);
  const perVerdict = {};
  const series = codes.map((c) => {
    const k = (perVerdict[c.verdict] = (perVerdict[c.verdict] || 0) + 1) - 1;
    return { key: c.code, label: `${c.code} ${c.verdict || ""}`, color: shade(VERDICT_COLOR[c.verdict] || "#94a3b8", k), values: xs.map(() => 0) };
  });
  const byKey = new Map(series.map((s) => [s.key, s]));
  for (const row of overTime.rows) {
    const s = byKey.get(row.code);
    const i = idx.get(Date.parse(row.time) / 1000);
    if (s && i !== undefined) s.values[i] += row.failures;
  }
  series.sort((a, b) => VERDICTS.indexOf(codes.find((c) => c.code === a.key).verdict) - VERDICTS.indexOf(codes.find((c) => c.code === b.key).verdict));
  stacked($("#failures-chart"), `Failures by code per ${step}`, xs, series, { yLabel: "failures" });

  const classes = byClass.rows.map((c) => ({ key: c.class, label: c.class, color: VERDICT_COLOR[c.verdict] || "#94a3b8", values: xs.map(() => 0) }));
  const byCls = new Map(classes.map((s) => [s.key, s]));
  for (const row of classTime.rows) {
    const s = byCls.get(row.class);
    const i = idx.get(Date.parse(row.time) / 1000);
    if (s && i !== undefined) s.values[i] += row.failures;
  }
  stacked($("#classes-chart"), `Failures by class per ${step}`, xs, classes, { yLabel: "failures", height: 200 });
}

// pacingSignals answers { signals } or, when /api/v1/pacing refuses (no
// NATS, the report limit, NATS not answering), { error: its message }: the
// pages say why there is no advice instead of showing none.
async function pacingSignals() {
  try { return { signals: (await api("/api/v1/pacing")).signals || [] }; } catch (e) { if (e instanceof AuthError || e.name === "AbortError") throw e; return { signals: [], error: e.message || "no answer" }; }
}

function pacingNote(p) {
  return p.error ? `Pacing signals are not available: ${p.error}.` : "";
}

// wabaStates answers the WABAs Meta banned, restricted or scheduled to
// disable (/api/v1/accounts), or none when the route refuses: the page
// goes on without them.
async function wabaStates() {
  try {
    const a = (await api("/api/v1/accounts")).accounts || [];
    return a.filter((x) => !x.business_initiated.allowed || !x.replies.allowed || x.ban_state === "SCHEDULE_FOR_DISABLE");
  } catch (e) { if (e instanceof AuthError || e.name === "AbortError") throw e; return []; }
}

// wabaStat is the number page's line for its WABA's ban or restriction,
// empty when it has none.
function wabaStat(a) {
  if (!a) return "";
  const why = [...new Set([a.business_initiated, a.replies].filter((s) => !s.allowed).map((s) => s.reason))];
  if (a.ban_state === "SCHEDULE_FOR_DISABLE") why.push("scheduled to be disabled" + (a.ban_date ? " on " + a.ban_date : ""));
  const blocked = !a.business_initiated.allowed || !a.replies.allowed;
  return `<span class="stat" id="number-waba">WABA ${esc(a.waba_id)}<b>${blocked ? badge("stop") : esc(a.ban_state)}</b>${esc(why.join("; "))}</span>`;
}

function sendCell(s) {
  if (s.allowed) return "allowed";
  return `<span class="badge v-stop">blocked</span> ${s.until ? "until " + esc(s.until) : "until Meta lifts it"}`;
}

async function renderNumbers() {
  const r = range();
  view().innerHTML = `<h1>Numbers</h1><div class="card" id="accounts-card" hidden><h2>WABAs Meta banned or restricted</h2><p class="muted">From Meta's account_update webhooks (<code>/api/v1/accounts</code>). The pacer stops these WABAs' numbers for what they may not send.</p><table id="accounts-table"><thead><tr><th>WABA</th><th>ban state</th><th>restrictions</th><th>business-initiated</th><th>replies</th><th>since</th></tr></thead><tbody></tbody></table></div><div class="card"><table id="numbers-table"><thead><tr><th>number</th><th>display</th><th>WABA</th><th class="num">tier (mps)</th><th>tier source</th><th>quality</th><th>messaging limit</th><th>advice</th><th class="num">recommended mps</th><th class="num">use of tier (10 s)</th></tr></thead><tbody></tbody></table><p class="muted" id="pacing-note"></p></div><div class="card" id="pending-card" hidden><h2>Waiting for their number</h2><p class="muted">Quality, limit and throughput-upgrade webhooks that named a display number no message webhook has paired with its phone number id yet. They apply to the number (tier, quality, pacing) as soon as it sends or receives a message.</p><table id="pending-table"><thead><tr><th>display number</th><th>WABA</th><th class="num">events</th><th>first</th><th>last</th><th>latest</th></tr></thead><tbody></tbody></table></div>`;
  const [nums, sigs, wabas] = await Promise.all([api("/api/v1/numbers?" + qs({ from: r.from, to: r.to, limit: 5 })), pacingSignals(), wabaStates()]);
  $("#accounts-card").hidden = wabas.length === 0;
  $("#accounts-table tbody").innerHTML = wabas.map((a) => `<tr data-waba="${esc(a.waba_id)}"><td>${esc(a.waba_id)}</td><td>${esc(a.ban_state || "–")}</td><td>${esc((a.restrictions || []).map((x) => x.type.replace(/^RESTRICTED_/, "").toLowerCase()).join(", ") || "–")}</td><td>${sendCell(a.business_initiated)}</td><td>${sendCell(a.replies)}</td><td>${esc((a.ban_state === "DISABLE" || a.ban_state === "SCHEDULE_FOR_DISABLE" ? a.ban_at : a.restrictions_at) || "")}</td></tr>`).join("");
  const sig = new Map(sigs.signals.map((s) => [s.phone_number_id, s]));
  $("#pacing-note").textContent = pacingNote(sigs);
  $("#numbers-table tbody").innerHTML = nums.numbers.map((n) => {
    const s = sig.get(n.phone_number_id);
    return `<tr data-number="${esc(n.phone_number_id)}"><td><a href="#number/${encodeURIComponent(n.phone_number_id)}">${esc(n.phone_number_id)}</a></td><td>${esc(n.display_phone_number)}</td><td>${esc(n.waba_id)}</td><td class="num" data-value="${n.tier_mps}">${fmt(n.tier_mps)}</td><td>${esc(n.tier_source)}</td><td>${esc(n.quality)}</td><td>${esc(n.messaging_limit || "–")}</td><td>${s ? badge(s.advice) : "–"}</td><td class="num">${s ? fmt(s.recommended_mps) : "–"}</td><td class="num">${s ? pct(s.utilization) : "–"}</td></tr>`;
  }).join("") || `<tr><td colspan="10" class="muted">No numbers in this range.</td></tr>`;
  const pending = nums.pending || [];
  $("#pending-card").hidden = pending.length === 0;
  $("#pending-table tbody").innerHTML = pending.map((p) => {
    const c = (p.recent_changes || [])[0] || {};
    return `<tr data-display="${esc(p.display_phone_number)}"><td>${esc(p.display_phone_number)}</td><td>${esc(p.waba_id)}</td><td class="num">${fmt(p.events)}</td><td>${esc(p.first_change)}</td><td>${esc(p.last_change)}</td><td>${esc([c.event, c.new_value].filter(Boolean).join(" "))}</td></tr>`;
  }).join("");
}

function fillThroughput(t, stepSec, from, to) {
  const xs = timeline(from, to, stepSec);
  const idx = new Map(xs.map((x, i) => [x, i]));
  const inb = xs.map(() => 0), outb = xs.map(() => 0), tier = xs.map(() => t.tier_mps);
  for (const p of t.points) {
    const i = idx.get(Date.parse(p.time) / 1000);
    if (i === undefined) continue;
    // A last bucket the range cuts (partial) is a rate over the seconds it
    // covers, as the API's mps: not over the whole step.
    const secs = p.partial && p.mps > 0 ? (p.inbound + p.outbound) / p.mps : stepSec;
    inb[i] = p.inbound / secs; outb[i] = p.outbound / secs; tier[i] = p.tier_mps;
  }
  return { xs, inb, outb, tier };
}

async function renderNumber(id) {
  id = decodeURIComponent(id || "");
  const r = range();
  // The throughput ends now, not at the preset's next minute: seconds to
  // come would read as traffic stopped, and the minute under way as a full
  // one.
  const end = Math.max(Math.min(r.to, Math.floor(Date.now() / 1000)), r.from + 1);
  const span = Math.min(end - r.from, 59 * 86400);
  const from = end - span;
  const secFrom = end - 900;
  view().innerHTML = `<h1>Number <span id="number-id">${esc(id)}</span></h1>
  <div class="card" id="number-state"></div>
  <div class="card"><div id="tp-minute" class="chart"></div></div>
  <div class="card"><div id="tp-second" class="chart"></div></div>
  <div class="row"><div class="card"><h2>Recent errors by class</h2><div id="number-errors" class="chart"></div><table id="number-errors-table"><thead><tr><th>class</th><th>verdict</th><th class="num">failures</th></tr></thead><tbody></tbody></table></div>
  <div class="card"><h2>Quality and messaging-limit history</h2><table id="number-history"><thead><tr><th>time</th><th>field</th><th>event</th><th>old</th><th>new</th></tr></thead><tbody></tbody></table></div></div>`;
  const step = autoStep({ from, to: end });
  // The totals by class are a query of their own, as on the Failures
  // page: the buckets' rows stop at the limit (a long range at a short
  // step), and their sums undercounted every class past it.
  const [nums, perMin, perSec, errTime, errs, sigs, wabas] = await Promise.all([
    api("/api/v1/numbers?" + qs({ phone_number_id: id, from: r.from, to: r.to, limit: 100 })),
    api("/api/v1/throughput?" + qs({ phone_number_id: id, from, to: end, step: "1m" })),
    api("/api/v1/throughput?" + qs({ phone_number_id: id, from: secFrom, to: end, step: "1s" })),
    api("/api/v1/failures?" + qs({ phone_number_id: id, from: r.from, to: r.to, group_by: "class", step, limit: 10000 })),
    api("/api/v1/failures?" + qs({ phone_number_id: id, from: r.from, to: r.to, group_by: "class" })),
    pacingSignals(),
    wabaStates(),
  ]);
  const n = nums.numbers[0] || {};
  const s = sigs.signals.find((x) => x.phone_number_id === id);
  $("#number-state").innerHTML = `<span class="stat">Tier<b id="number-tier" data-value="${n.tier_mps}">${fmt(n.tier_mps)} mps</b>${esc(n.tier_source)}</span>
    <span class="stat">Quality<b>${esc(n.quality)}</b></span><span class="stat">Messaging limit<b>${esc(n.messaging_limit || "–")}</b></span>
    <span class="stat">Advice<b>${s ? badge(s.advice) : "–"}</b>${s ? esc(s.reason) : ""}</span><span class="stat">Recommended<b>${s ? fmt(s.recommended_mps) + " mps" : "–"}</b></span>
    <span class="stat">Outbound<b id="number-outbound" data-value="${perMin.outbound}">${fmt(perMin.outbound)}</b></span><span class="stat">Inbound<b id="number-inbound" data-value="${perMin.inbound}">${fmt(perMin.inbound)}</b></span>
    <span class="stat">Peak<b>${fmt(perMin.peak_mps)} mps</b>${pct(perMin.peak_utilization)} of tier</span>
    ${wabaStat(wabas.find((a) => a.waba_id === n.waba_id))}
    <p class="muted" id="pacing-note">${esc(pacingNote(sigs))}</p>`;
  const m = fillThroughput(perMin, 60, from, end);
  stacked($("#tp-minute"), "Messages per second, per minute, against the tier", m.xs,
    [{ label: "inbound", color: "#0ea5e9", values: m.inb }, { label: "outbound", color: "#6366f1", values: m.outb }],
    { lines: [{ label: "tier", color: "#dc2626", values: m.tier }], yLabel: "msg/s" });
  const sc = fillThroughput(perSec, 1, secFrom, end);
  stacked($("#tp-second"), "Messages per second, last 15 minutes of the range", sc.xs,
    [{ label: "inbound", color: "#0ea5e9", values: sc.inb }, { label: "outbound", color: "#6366f1", values: sc.outb }],
    { lines: [{ label: "tier", color: "#dc2626", values: sc.tier }], yLabel: "msg/s" });
  if (errTime.truncated) $("#number-errors").insertAdjacentHTML("beforebegin", `<p class="muted" id="number-errors-truncated">The chart holds the first 10,000 buckets and classes of the range (a shorter range shows them all); the table counts the whole range.</p>`);
  $("#number-errors-table tbody").innerHTML = errs.rows.map((x) => `<tr data-class="${esc(x.class)}"><td>${esc(x.class)}</td><td>${badge(x.verdict)}</td><td class="num" data-value="${x.failures}">${fmt(x.failures)}</td></tr>`).join("") || `<tr><td colspan="3" class="muted">No errors in this range.</td></tr>`;
  const sec = { "1m": 60, "1h": 3600, "1d": 86400 }[step];
  const xs = timeline(r.from, r.to, sec), idx = new Map(xs.map((x, i) => [x, i]));
  const cls = errs.rows.map((c) => ({ key: c.class, label: c.class, color: VERDICT_COLOR[c.verdict] || "#94a3b8", values: xs.map(() => 0) }));
  const byCls = new Map(cls.map((c) => [c.key, c]));
  for (const row of errTime.rows) { const c = byCls.get(row.class), i = idx.get(Date.parse(row.time) / 1000); if (c && i !== undefined) c.values[i] += row.failures; }
  stacked($("#number-errors"), `Errors by class per ${step}`, xs, cls, { height: 200 });
  const hist = (n.recent_changes || []).filter((c) => /quality|limit|tier/i.test(c.field + c.event));
  $("#number-history tbody").innerHTML = hist.map((c) => `<tr><td>${esc(c.time)}</td><td>${esc(c.field)}</td><td>${esc(c.event)}</td><td>${esc(c.old_value)}</td><td>${esc(c.new_value)}</td></tr>`).join("") || `<tr><td colspan="5" class="muted">No quality or limit changes known.</td></tr>`;
}

function funnelTable(id, f) {
  return `<table id="${id}"><thead><tr><th>${esc(f.by)}</th><th class="num">messages</th><th class="num">sent</th><th class="num">delivered</th><th class="num">read</th><th class="num">failed</th><th class="num">sent→delivered p50</th><th class="num">p95</th><th class="num">sent→read p50</th><th class="num">p95</th></tr></thead><tbody>${
    f.rows.map((x) => `<tr data-key="${esc(x.key)}"><td>${esc(x.key || "(none)")}</td><td class="num" data-value="${x.messages}">${fmt(x.messages)}</td><td class="num" data-value="${x.sent}">${fmt(x.sent)}</td><td class="num" data-value="${x.delivered}">${fmt(x.delivered)}</td><td class="num" data-value="${x.read}">${fmt(x.read)}</td><td class="num" data-value="${x.failed}">${fmt(x.failed)}</td><td class="num">${secs(x.sent_to_delivered_seconds.p50)}</td><td class="num">${secs(x.sent_to_delivered_seconds.p95)}</td><td class="num">${secs(x.sent_to_read_seconds.p50)}</td><td class="num">${secs(x.sent_to_read_seconds.p95)}</td></tr>`).join("") || `<tr><td colspan="10" class="muted">No messages in this range.</td></tr>`
  }</tbody></table>`;
}

async function renderFunnel() {
  const r = range();
  const f = filterState();
  const base = { from: r.from, to: r.to, campaign: f.campaign, template: f.template, waba_id: f.waba_id, phone_number_id: f.phone_number_id };
  const [byCampaign, byTemplate, total] = await Promise.all([
    api("/api/v1/funnel?" + qs({ ...base, by: "campaign", limit: 50 })),
    api("/api/v1/funnel?" + qs({ ...base, by: "template", limit: 50 })),
    api("/api/v1/funnel?" + qs({ ...base, by: "total" })),
  ]);
  const t = total.rows[0] || { messages: 0, sent: 0, delivered: 0, read: 0, failed: 0, sent_to_delivered_seconds: {}, sent_to_read_seconds: {} };
  view().innerHTML = `<h1>Funnel</h1>
  <div class="card"><span class="stat">Sent<b id="funnel-sent" data-value="${t.sent}">${fmt(t.sent)}</b></span><span class="stat">Delivered<b id="funnel-delivered" data-value="${t.delivered}">${fmt(t.delivered)}</b></span><span class="stat">Read<b id="funnel-read" data-value="${t.read}">${fmt(t.read)}</b></span><span class="stat">Failed<b id="funnel-failed" data-value="${t.failed}">${fmt(t.failed)}</b></span>
  <span class="stat">Sent→delivered p50 / p95<b>${secs(t.sent_to_delivered_seconds.p50)} / ${secs(t.sent_to_delivered_seconds.p95)}</b></span><span class="stat">Sent→read p50 / p95<b>${secs(t.sent_to_read_seconds.p50)} / ${secs(t.sent_to_read_seconds.p95)}</b></span>
  <p class="muted">As of ${esc(total.as_of || "now (resolved at query time)")}. A message counts once per recipient; once failed always failed.</p></div>
  <div class="card"><div id="funnel-chart" class="chart"></div></div>
  <div class="card"><h2>By campaign</h2>${funnelTable("funnel-campaign", byCampaign)}</div>
  <div class="card"><h2>By template</h2>${funnelTable("funnel-template", byTemplate)}</div>`;
  const rows = byCampaign.rows.slice(0, 12);
  bars($("#funnel-chart"), "Sent → delivered → read, failed, by campaign", rows.map((x) => x.key || "(none)"), [
    { label: "sent", color: "#64748b", values: rows.map((x) => x.sent) },
    { label: "delivered", color: "#0ea5e9", values: rows.map((x) => x.delivered) },
    { label: "read", color: "#16a34a", values: rows.map((x) => x.read) },
    { label: "failed", color: "#dc2626", values: rows.map((x) => x.failed) },
  ]);
}

async function renderDeadLetters() {
  const r = range();
  const d = await api("/api/v1/dead-letters?" + qs({ from: r.from, to: r.to, limit: 50 }));
  view().innerHTML = `<h1>Dead letters</h1>
  <div class="card"><span class="stat">Dead letters<b id="dead-count" data-value="${d.count}">${fmt(d.count)}</b></span><span class="stat">Bodies<b>${fmt(d.bodies)}</b></span><p class="muted">Bodies and items stage 1 could not decode. Bodies are never shown here; they stay in ClickHouse to be looked at, and RAW keeps each for its max age (7 days by default), the time to fix the decoder and replay it.</p></div>
  <div class="row"><div class="card"><h2>By reason</h2><div id="dead-chart" class="chart"></div><table id="dead-reasons"><thead><tr><th>reason</th><th class="num">count</th><th>last seen</th></tr></thead><tbody>${
    d.by_reason.map((x) => `<tr><td>${esc(x.reason)}</td><td class="num" data-value="${x.count}">${fmt(x.count)}</td><td>${esc(x.last_seen)}</td></tr>`).join("") || `<tr><td colspan="3" class="muted">None in this range.</td></tr>`}</tbody></table></div>
  <div class="card"><h2>Most recent</h2><table id="dead-recent"><thead><tr><th>received</th><th>app</th><th>reason</th><th>item</th><th>error</th></tr></thead><tbody>${
    d.recent.map((x) => `<tr><td>${esc(x.received_at)}</td><td>${esc(x.app)}</td><td>${esc(x.reason)}</td><td>${esc(x.item || "(body)")}</td><td>${esc(x.error)}</td></tr>`).join("") || `<tr><td colspan="5" class="muted">None.</td></tr>`}</tbody></table></div></div>`;
  bars($("#dead-chart"), "Dead letters by reason", d.by_reason.map((x) => x.reason), [{ label: "count", color: "#dc2626", values: d.by_reason.map((x) => x.count) }]);
}

// ---- live ----

const SEVERITY = { stop: 0, pause: 1, slow_down: 2, ok: 3 };

async function renderLive() {
  view().innerHTML = `<h1>Live pacing</h1><div class="card"><p class="muted">Each number's pacing signal as stage 2 writes it (KV <code>wahook_pacing</code>), pushed to this page as it changes; numbers at stop, pause and slow_down on top. <span id="live-status">connecting…</span></p>
  <table id="live-table"><thead><tr><th>number</th><th>advice</th><th class="num">recommended mps</th><th class="num">tier</th><th class="num">observed 10 s</th><th class="num">use of tier</th><th>quality</th><th>recent errors (60 s)</th><th>reason</th><th>updated</th></tr></thead><tbody></tbody></table></div>`;
  const signals = new Map();
  let flash = new Set();
  const draw = () => {
    const rows = [...signals.values()].sort((a, b) => (SEVERITY[a.advice] ?? 4) - (SEVERITY[b.advice] ?? 4) || a.phone_number_id.localeCompare(b.phone_number_id));
    $("#live-table tbody").innerHTML = rows.map((s) => `<tr data-number="${esc(s.phone_number_id)}" data-advice="${esc(s.advice)}" data-updated="${esc(s.updated_at)}"${flash.has(s.phone_number_id) ? ' class="flash"' : ""}><td><a href="#number/${encodeURIComponent(s.phone_number_id)}">${esc(s.phone_number_id)}</a></td><td>${badge(s.advice)}</td><td class="num">${fmt(s.recommended_mps)}</td><td class="num">${fmt(s.tier_mps)}</td><td class="num">${fmt(s.observed_mps && s.observed_mps["10s"])}</td><td class="num">${pct(s.utilization)}</td><td>${esc(s.quality)}</td><td>${esc(Object.entries(s.recent_errors || {}).map(([k, v]) => k + " " + v).join(", "))}</td><td>${esc(s.reason)}</td><td>${esc(s.updated_at)}</td></tr>`).join("") || `<tr><td colspan="10" class="muted">No signals yet.</td></tr>`;
    flash = new Set();
  };
  // The table is drawn at most every 100 ms: stage 2 rewrites a busy
  // number's signal every 100 ms to 1 s, and a draw per event froze the
  // tab with hundreds of numbers (and replaced the rows under the mouse).
  let drawTimer = 0;
  const redraw = () => {
    if (!drawTimer) drawTimer = setTimeout(() => { drawTimer = 0; if ($("#live-table")) draw(); }, 100);
  };
  draw();
  const ctrl = new AbortController();
  liveAbort = ctrl;
  const token = sessionStorage.getItem(TOKEN_KEY);
  const status = (text, state) => {
    const el = $("#live-status");
    if (el) el.textContent = text;
    document.body.dataset.live = state;
  };
  const open = () => {
    window.wahookRequests.push("/api/v1/pacing/stream");
    return fetch("/api/v1/pacing/stream", { headers: { Authorization: "Bearer " + token, Accept: "text/event-stream" }, signal: ctrl.signal });
  };
  // read applies a stream's events until it ends (the server went away,
  // or the connection broke). A stream sends every current signal before
  // its ready: at ready, the numbers it did not send (a reconnect with the
  // token's new scope, a signal gone meanwhile) leave the table.
  const read = async (resp) => {
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    const sent = new Set();
    // The server beats every 15 s: a stream silent for 45 s is dead (a
    // laptop that slept, a network that changed) though no error came,
    // and is given up for a new one.
    let heard = Date.now();
    const watchdog = setInterval(() => { if (Date.now() - heard > 45000) reader.cancel().catch(() => {}); }, 5000);
    ctrl.signal.addEventListener("abort", () => clearInterval(watchdog), { once: true });
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        heard = Date.now();
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i); buf = buf.slice(i + 2);
          let event = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          if (event === "signal") {
            const s = JSON.parse(data);
            signals.set(s.phone_number_id, s);
            sent.add(s.phone_number_id);
            flash.add(s.phone_number_id);
            redraw();
          } else if (event === "delete") {
            // The number's key was deleted or purged: its signal is gone,
            // not merely unchanged.
            const id = JSON.parse(data).phone_number_id;
            signals.delete(id);
            sent.delete(id);
            redraw();
          } else if (event === "ready") {
            for (const id of [...signals.keys()]) if (!sent.has(id)) signals.delete(id);
            redraw();
            status("connected", "ready");
          }
        }
      }
    } finally {
      clearInterval(watchdog);
    }
  };
  const pause = (ms) => new Promise((resolve) => { const t = setTimeout(resolve, ms); ctrl.signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true }); });
  // A first connection that fails (the API restarting) is tried again
  // below, as a broken stream is.
  let resp = null;
  try { resp = await open(); } catch (e) { if (e.name === "AbortError") return; }
  if (ctrl.signal.aborted) return;
  if (resp && resp.status === 401) throw new AuthError("token refused");
  // Refusals for good (403, 404) end here; 429 and the 5xx (a proxy's 502
  // while the API restarts, the API's 503) are for now, and are tried again
  // below, saying the API's reason.
  const refusal = async (r) => ((await r.json().catch(() => ({}))).error || {}).message || "HTTP " + r.status;
  let why = "";
  if (resp && !resp.ok) {
    why = await refusal(resp);
    if (resp.status !== 429 && resp.status < 500) { $("#live-status").textContent = "not available: " + why; return; }
  }
  if (resp && resp.ok) status("connected", "connected");
  // Read the stream in the background; the view counts as loaded now. When
  // it ends (or could not open for now), say so and connect again, 1 s
  // after the first failure and doubling to 30 s; a stream that lived a
  // minute starts the wait over. The signals shown stay until the next stream is ready.
  (async () => {
    let current = resp && resp.ok ? resp : null, wait = 1000;
    for (;;) {
      if (current) {
        const opened = Date.now();
        try { await read(current); } catch (e) { if (e.name === "AbortError") return; }
        if (ctrl.signal.aborted) return;
        if (Date.now() - opened > 60000) wait = 1000;
        current = null;
      }
      status(`disconnected${why ? " (" + why + ")" : ""}; connecting again in ${Math.round(wait / 1000)} s…`, "disconnected");
      await pause(wait);
      if (ctrl.signal.aborted) return;
      wait = Math.min(wait * 2, 30000);
      try {
        const next = await open();
        // As on every page: a token refused signs out.
        if (next.status === 401) { logout("The token was refused."); return; }
        why = next.ok ? "" : await refusal(next);
        if (next.ok) { current = next; status("connected", "connected"); }
      } catch (e) { if (e.name === "AbortError") return; }
    }
  })();
}

// ---- login ----

function logout(msg) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (liveAbort) { liveAbort.abort(); liveAbort = null; }
  // A page still loading must not draw under the login form.
  routeAbort.abort();
  routeAbort = new AbortController();
  routeGen++;
  clearCharts();
  view().innerHTML = "";
  $("#nav").hidden = true; $("#range").hidden = true; $("#login").hidden = false;
  $("#login-error").textContent = msg || "";
  document.body.dataset.loaded = "login";
}

async function start() {
  if (!sessionStorage.getItem(TOKEN_KEY)) return logout();
  $("#login").hidden = true; $("#nav").hidden = false; $("#range").hidden = false;
  await route();
}

// showLinkRange shows a link's range (from/to in the location) in the range
// controls, as a custom range, when it is not the one shown already: a
// route that keeps it (a filter applied) leaves the inputs as the user
// left them.
let shownLinkRange = "";
function showLinkRange() {
  const hp = hashParams().params;
  const f = Number(hp.get("from")), t = Number(hp.get("to"));
  const key = f && t ? f + "-" + t : "";
  if (key === shownLinkRange) return;
  shownLinkRange = key;
  if (!key) return;
  const local = (sec) => new Date(sec * 1000).toISOString().slice(0, 16);
  $("#range-preset").value = "custom";
  $("#range-custom").hidden = false;
  $("#range-from").value = local(f);
  $("#range-to").value = local(t);
}

// dropLinkRange removes a link's range from the location, which routes
// again (true); false when there was none.
function dropLinkRange() {
  const { path, params } = hashParams();
  if (!params.has("from") && !params.has("to")) return false;
  params.delete("from"); params.delete("to");
  const s = params.toString();
  location.hash = path + (s ? "?" + s : "");
  return true;
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = $("#login-token").value.trim();
    sessionStorage.setItem(TOKEN_KEY, token);
    try {
      // The token's check is no page's: a navigation meanwhile (the back
      // button) must not abort it and sign out a valid token.
      await api("/api/v1/error-codes", new AbortController().signal);
      $("#login-token").value = "";
      // Another token than the last one of this tab: the page stays, its
      // filters and range go, and a number's page is Numbers (a link
      // opened in a new tab keeps them).
      const tag = tokenTag(token), prev = sessionStorage.getItem(FILTERS_TOKEN_KEY);
      sessionStorage.setItem(FILTERS_TOKEN_KEY, tag);
      if (prev && prev !== tag) {
        const path = hashParams().path.startsWith("number/") ? "numbers" : hashParams().path;
        if (location.hash !== "#" + path) history.replaceState(null, "", "#" + path);
      }
      await start();
    } catch (err) {
      logout(err instanceof AuthError ? "The token was refused." : err.message);
    }
  });
  $("#logout").onclick = () => logout();
  // A range chosen here replaces a link's (from/to in the location): it
  // was kept, and the select said one range while the page showed another.
  $("#range-preset").onchange = () => {
    $("#range-custom").hidden = $("#range-preset").value !== "custom";
    if ($("#range-preset").value !== "custom" && !dropLinkRange()) route();
  };
  $("#range-apply").onclick = () => { if (!dropLinkRange()) route(); };
  window.addEventListener("hashchange", () => { if (sessionStorage.getItem(TOKEN_KEY)) route(); });
  start();
});
