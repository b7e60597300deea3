#pragma once
/// The page `specgen-report` writes: one self-contained HTML file (HTML, CSS and
/// JavaScript, no network access, works from file://) that shows one or more runs:
/// best speedup over time per task (runs overlaid), reasoning streams and forks per
/// search, jobs per GPU with pool utilisation, verdicts, tokens and the best kernels.
///
/// The C++ side replaces the one occurrence of `__SPECGEN_REPORT_DATA__` (inside the
/// `<script type="application/json" id="specgen-data">` element) with the report's JSON,
/// in which every `</` is written `<\/` so that no string in the data can end the element.
/// The JSON is `{"format": "specgen-report/1", "generated_by": ..., "runs": [...]}`; every
/// field may be missing or null and every array may be empty: the page then shows
/// "no data" in the views concerned instead of failing.
///
/// For automated checks the page sets, once it has rendered, `data-rendered="1"`,
/// `data-render-ms` (from the start of its script) and `data-load-ms` (reading the data) on
/// <body>, `data-items` (the number of things drawn or listed) and `data-ms` on each view's
/// <section>, and collects script errors in `data-errors` on <body>.
///
/// The text is ASCII only, so the compiler's source character set does not matter.
#include <specgen/detail/config.hpp>

#include <string_view>

SPECGEN_BEGIN_NAMESPACE
namespace detail {

// The page is longer than the 65,536 characters the standard asks compilers to support
// in one literal; GCC and Clang take it, and Clang's -Wpedantic note about it is off here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverlength-strings"

/// The report page: HTML, CSS and JavaScript in one file. The C++ side replaces the one
/// occurrence of `__SPECGEN_REPORT_DATA__` (inside the <script type="application/json" id="specgen-data"> element)
/// with the report's JSON (in which every "</" is written "<\/").
inline constexpr std::string_view report_page = R"SPECGEN_PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specgen report</title>
<style>
*{box-sizing:border-box}
:root{--bg:#f3f4f6;--card:#fff;--ink:#111827;--ink2:#374151;--muted:#6b7280;--line:#e5e7eb;--soft:#f9fafb;--accent:#2563eb}
html{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif;font-size:14px;color:var(--ink);background:var(--bg)}
body{margin:0;line-height:1.45}
.top{background:linear-gradient(180deg,#0f172a,#1e293b);color:#e5e7eb;padding:18px 0 16px}
.wrapx{max-width:1480px;margin:0 auto;padding:0 28px}
.top .wrapx{display:flex;align-items:center;gap:18px 28px;flex-wrap:wrap}
.brand{font-size:21px;font-weight:650;letter-spacing:-.01em;color:#fff;white-space:nowrap}
.brand small{display:block;font-weight:400;color:#94a3b8;font-size:12px;letter-spacing:0}
.chips{display:flex;gap:10px;flex-wrap:wrap;flex:1}
.chip{background:rgba(255,255,255,.06);border:1px solid rgba(255,255,255,.12);border-left:4px solid #64748b;border-radius:8px;padding:6px 12px 7px;min-width:180px}
.chip b{color:#fff;font-size:14px;font-weight:600}
.chip .cn{display:flex;gap:14px;margin-top:2px;font-size:12px;color:#cbd5e1;font-variant-numeric:tabular-nums;flex-wrap:wrap}
.chip .cn em{font-style:normal;color:#fff;font-weight:600}
.gen{color:#94a3b8;font-size:12px;text-align:right}
.banner{background:#fef3c7;color:#78350f;border:1px solid #fcd34d;border-radius:8px;padding:10px 14px;margin:16px 0 0}
nav{position:sticky;top:0;z-index:5;background:rgba(255,255,255,.94);border-bottom:1px solid var(--line)}
nav .wrapx{display:flex;gap:2px;flex-wrap:wrap}
nav a{color:var(--ink2);text-decoration:none;padding:9px 10px 8px;font-size:13px;border-bottom:2px solid transparent}
nav a:hover{color:var(--accent);border-bottom-color:var(--accent)}
main{padding-top:4px;padding-bottom:40px}
section.view{background:var(--card);border:1px solid var(--line);border-radius:10px;margin:16px 0;padding:16px 20px 18px;box-shadow:0 1px 2px rgba(16,24,40,.05)}
.vh{display:flex;align-items:flex-start;gap:10px 20px;justify-content:space-between;flex-wrap:wrap;margin-bottom:10px}
.vh h2{font-size:16px;margin:0 0 3px;font-weight:650}
.lead{margin:0;color:var(--muted);font-size:13px;max-width:980px}
.ctl{display:flex;gap:12px;align-items:center;font-size:13px;color:var(--ink2)}
.ctl label{display:flex;gap:6px;align-items:center}
select{font:inherit;font-size:13px;padding:4px 8px;border:1px solid #d1d5db;border-radius:6px;background:#fff;color:var(--ink);max-width:320px}
h3{font-size:13px;font-weight:600;margin:16px 0 4px;color:var(--ink2)}
h3 .lead{display:inline;font-weight:400;margin-left:6px}
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12px;color:var(--ink2);margin:2px 0 8px}
.legend span{white-space:nowrap}
.legend i{display:inline-block;width:11px;height:11px;border-radius:3px;margin-right:5px;vertical-align:-1px}
.legend i.ln{height:3px;width:18px;border-radius:2px;vertical-align:3px}
.legend i.tk{width:2px;height:12px;border-radius:0;vertical-align:-2px}
.legend i.tri{width:0;height:0;border-radius:0;border-left:5px solid transparent;border-right:5px solid transparent;border-top:7px solid #111827;background:none;vertical-align:0}
.legend i.short{height:6px;vertical-align:0}
.legend .sep{color:#d1d5db}
.nodata{color:var(--muted);font-style:italic;padding:16px;border:1px dashed #d1d5db;border-radius:8px;text-align:center;background:var(--soft)}
.failed{color:#991b1b;background:#fef2f2;border-color:#fecaca}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(300px,1fr));gap:10px}
.sm{border:1px solid var(--line);border-radius:8px;padding:7px 8px 2px;min-width:0}
.sm-h{display:flex;justify-content:space-between;align-items:baseline;gap:8px;font-size:13px;padding:0 2px}
.sm-h b{font-weight:600;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.sm-v{font-size:12px;font-variant-numeric:tabular-nums;white-space:nowrap}
.sm-v span{margin-left:8px;font-weight:600}
.big{border:1px solid var(--line);border-radius:8px;padding:8px 8px 2px;margin-bottom:12px}
canvas{display:block}
.tl{position:relative;border:1px solid var(--line);border-radius:8px;overflow:hidden}
.tl+.tl{margin-top:8px}
.tl-over{position:absolute;left:0;top:0;cursor:crosshair}
.tscroll{max-height:760px;overflow-y:auto;border-radius:8px}
table{border-collapse:collapse;width:100%;font-size:13px;font-variant-numeric:tabular-nums}
th{text-align:left;font-weight:600;color:var(--ink2);background:var(--soft);border-bottom:1px solid var(--line);padding:7px 10px;white-space:nowrap;position:relative}
th.sortable{cursor:pointer;user-select:none}
th.sortable:hover{color:var(--accent)}
th .arr{color:var(--accent);margin-left:3px}
td{border-bottom:1px solid #f0f1f3;padding:6px 10px;vertical-align:top}
tr.grp td{border-top:1px solid var(--line)}
tfoot td{font-weight:600;background:var(--soft);border-top:1px solid var(--line)}
.n{text-align:right;white-space:nowrap}
.mut{color:var(--muted)}
.sw{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:7px;vertical-align:0}
.small{font-size:12px}
.delta{font-size:11px;margin-left:6px}
.up{color:#15803d}.down{color:#b91c1c}
.cellbar{display:flex;align-items:center;gap:8px;justify-content:flex-end}
.cellbar .b{height:7px;border-radius:2px;background:#93c5fd;min-width:1px}
.spcell{display:grid;grid-template-columns:56px 110px 44px;gap:8px;align-items:center}
.spcell b{text-align:right}
.spcell .track{height:8px;background:#f1f5f9;border-radius:2px;overflow:hidden}
.spcell .track div{height:100%;border-radius:2px}
.badge{display:inline-block;font-size:11px;font-weight:600;padding:0 6px;border-radius:9px;background:#dcfce7;color:#166534;margin-left:6px;vertical-align:1px}
.vrow{display:grid;grid-template-columns:170px 120px 1fr 64px;gap:10px;align-items:center;padding:3px 0}
.vrow.one{grid-template-columns:170px 1fr 64px}
.vrow.first{border-top:1px solid #f0f1f3;padding-top:6px;margin-top:3px}
.vrow .t{font-weight:600;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.vrow .r{font-size:12px;color:var(--ink2);overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.vtrack{height:16px;background:#f3f4f6;border-radius:3px;overflow:hidden}
.vbar{display:flex;height:100%}
.vbar span{height:100%;min-width:1px;border-right:1px solid rgba(255,255,255,.6)}
.vbar span:last-child{border-right:0}
details summary{cursor:pointer;color:var(--accent);font-size:12px;white-space:nowrap}
details[open] summary{margin-bottom:6px}
.code h4{margin:8px 0 3px;font-size:11px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted)}
pre{margin:0;background:#0f172a;color:#e2e8f0;padding:10px 12px;border-radius:6px;font:12px/1.5 ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;white-space:pre;overflow:auto;max-height:460px;max-width:min(900px,70vw)}
.tip{position:fixed;z-index:20;pointer-events:none;background:#111827;color:#f3f4f6;font-size:12px;padding:7px 10px;border-radius:6px;box-shadow:0 6px 18px rgba(0,0,0,.28);max-width:440px;display:none;line-height:1.45}
.tip b{color:#fff}
.tip .k{color:#9ca3af}
.tip .sw{width:9px;height:9px}
.tip td{border:0;padding:0 10px 0 0}
footer{color:var(--muted);font-size:12px;text-align:center;padding:0 0 28px}
</style>
</head>
<body>
<header class="top"><div class="wrapx">
  <div class="brand"><span id="hdr-title">specgen report</span><small id="hdr-sub">kernel search runs</small></div>
  <div class="chips" id="hdr-runs"></div>
  <div class="gen" id="hdr-gen"></div>
</div></header>
<nav><div class="wrapx">
  <a href="#view-summary">Summary</a><a href="#view-speedup">Speedup</a><a href="#view-streams">Streams &amp; forks</a>
  <a href="#view-gpus">GPUs</a><a href="#view-verdicts">Verdicts</a><a href="#view-tokens">Tokens &amp; forks</a><a href="#view-best">Best kernels</a>
</div></nav>
<main class="wrapx">
<div id="banner"></div>
<section id="view-summary" class="view" data-items="0">
  <div class="vh"><div><h2>Summary</h2><p class="lead">One row per run. Differences are relative to the first run. Pool utilisation is the busy share of the evaluator's devices over the run, as the run measured it.</p></div></div>
  <div class="vb"></div>
</section>
<section id="view-speedup" class="view" data-items="0">
  <div class="vh"><div><h2>Best speedup over time</h2><p class="lead">Best speedup over the task's baseline found so far (log scale; the dashed line is 1&times;, the baseline), against seconds since the run started. A task's curve starts when its first kernel passes. Hover for values.</p></div></div>
  <div class="vb"></div>
</section>
<section id="view-streams" class="view" data-items="0">
  <div class="vh"><div><h2>Reasoning streams and forks</h2><p class="lead">Per search: the main reasoning stream, one bar per round coloured by how the round ended, and below it the fork generations started from partial reasoning, coloured by what triggered them. Drag to zoom, double-click to reset.</p></div><div class="ctl"></div></div>
  <div class="vb"></div>
</section>
<section id="view-gpus" class="view" data-items="0">
  <div class="vh"><div><h2>Devices</h2><p class="lead">Every compile, validate and profile job as a bar on the device that ran it, coloured by its verdict. Below, the share of GPU rows busy over time (the compile row excluded). Drag to zoom, double-click to reset.</p></div><div class="ctl"></div></div>
  <div class="vb"></div>
</section>
<section id="view-verdicts" class="view" data-items="0">
  <div class="vh"><div><h2>Verdicts per task</h2><p class="lead">Final verdict of every candidate, summed over the task's searches; one bar per task and run, its length the number of candidates.</p></div></div>
  <div class="vb"></div>
</section>
<section id="view-tokens" class="view" data-items="0">
  <div class="vh"><div><h2>Tokens and forks per task</h2><p class="lead">Generated tokens, forks, early terminations, candidates and rounds per task, summed over its searches. Click a column to sort the tasks by it.</p></div></div>
  <div class="vb"></div>
</section>
<section id="view-best" class="view" data-items="0">
  <div class="vh"><div><h2>Best kernel per task</h2><p class="lead">One row per task and run with the best passing kernel the run found; with several runs, &ldquo;best&rdquo; marks the fastest across runs. Open a row for its launch plan and source.</p></div></div>
  <div class="vb"></div>
</section>
</main>
<footer id="foot"></footer>
<script type="application/json" id="specgen-data">__SPECGEN_REPORT_DATA__</script>
<script>
/*
 * How this page is organised
 *  1. Error hooks (script errors are collected in <body data-errors>) and helpers:
 *     number formatting, colours, DOM building, canvas set-up, the tooltip.
 *  2. load(): parses the JSON in #specgen-data and normalises each run, so that the
 *     views never meet a missing field (numbers become null, arrays become empty).
 *  3. Canvas widgets: makeTimeline (time axis, row labels, drag-to-zoom, hover through a
 *     bucketed HitIndex, highlights on an overlay canvas) for the streams and device views,
 *     and drawSpeedChart for the speedup charts.
 *  4. One render function per view; each fills its <section>, sets data-items to the
 *     number of things drawn or listed, and shows "no data" when there is nothing.
 *  5. main(): renders every view (a failing view shows its error, the others still
 *     render) and sets <body data-rendered="1" data-render-ms="...">.
 * Jobs, rounds and forks are drawn on <canvas> so that runs with tens of thousands of
 * them stay fast; the tables have one row per run, task or task and run.
 */
'use strict';
const T_START = performance.now();

// ---------------------------------------------------------------- 1. errors and helpers
function noteError(msg) {
  const b = document.body;
  if (!b) return;
  b.dataset.errors = b.dataset.errors ? b.dataset.errors + ' | ' + msg : String(msg);
}
window.onerror = (msg, src, line) => { noteError(String(msg) + (line ? ' (line ' + line + ')' : '')); };
window.addEventListener('unhandledrejection', (e) => {
  const r = e && e.reason;
  noteError('unhandled rejection: ' + String(r && r.message ? r.message : r));
});

const FONT = 'system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Noto Sans","Liberation Sans",sans-serif';
const TIMES = '\u00d7', DOT = ' \u00b7 ', DASH = '\u2013';
const isNum = (v) => typeof v === 'number' && Number.isFinite(v);
const num = (v) => (isNum(v) ? v : null);
const arr = (v) => (Array.isArray(v) ? v : []);
const obj = (v) => (v && typeof v === 'object' && !Array.isArray(v) ? v : {});
const str = (v) => (typeof v === 'string' ? v : isNum(v) ? String(v) : '');
const idx = (v) => (Number.isInteger(v) && v >= 0 ? v : -1);
const clamp = (v, a, b) => (v < a ? a : v > b ? b : v);

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}
function fmtInt(v) { return isNum(v) ? Math.round(v).toLocaleString('en-US') : DASH; }
function fmtSec(v) {
  if (!isNum(v)) return DASH;
  const a = Math.abs(v);
  return (a < 10 ? v.toFixed(2) : a < 100 ? v.toFixed(1) : fmtInt(v)) + ' s';
}
function fmtDur(v) {  // "602 s (10.0 min)"
  if (!isNum(v)) return DASH;
  if (v < 120) return fmtSec(v);
  return fmtSec(v) + (v < 7200 ? ' (' + (v / 60).toFixed(1) + ' min)' : ' (' + (v / 3600).toFixed(2) + ' h)');
}
function fmtX(v) {
  if (!isNum(v)) return DASH;
  return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v >= 0.1 ? v.toFixed(2) : v.toPrecision(2)) + TIMES;
}
function fmtPct(v) {
  if (!isNum(v)) return DASH;
  const p = v * 100;
  return (p !== 0 && Math.abs(p) < 10 ? p.toFixed(1) : p.toFixed(0)) + '%';
}
function fmtShort(v) { return String(+v.toPrecision(4)); }

// Colours: one per verdict (fixed for the known kinds), per fork trigger, per round end and per run.
const VERDICT_COLORS = {
  ok: '#16a34a', suspicious: '#eab308', unstable: '#fb923c', wrong_result: '#dc2626',
  nonfinite_output: '#f97316', input_mutation: '#e11d48', out_of_bounds_write: '#c2410c',
  compile_error: '#9ca3af', invalid_plan: '#9333ea', timeout: '#7f1d1d', fault: '#1f2937',
};
const VERDICT_ORDER = Object.keys(VERDICT_COLORS);
const FALLBACK = ['#0d9488', '#0284c7', '#a16207', '#4f46e5', '#0891b2'];  // away from the verdicts' reds, greens and purples
const TRIGGER_COLORS = {
  idle_resources: '#0ea5e9', design_decision: '#8b5cf6', implementation_hint: '#14b8a6',
  fence_closed: '#f59e0b', function_body_complete: '#ec4899', token_interval: '#64748b',
};
const REASON_COLORS = { answer: '#3b82f6', terminated: '#10b981', target_reached: '#047857', stream_error: '#dc2626', cancelled: '#a8a29e' };
const RUN_COLORS = ['#2563eb', '#ea580c', '#059669', '#9333ea', '#db2777', '#0891b2', '#ca8a04', '#475569'];
function hashStr(s) { let x = 0; for (let i = 0; i < s.length; i++) x = (x * 31 + s.charCodeAt(i)) >>> 0; return x; }
const verdictColor = (n) => VERDICT_COLORS[n] || FALLBACK[hashStr(String(n)) % FALLBACK.length];
const triggerColor = (n) => TRIGGER_COLORS[n] || FALLBACK[hashStr(String(n)) % FALLBACK.length];
const reasonColor = (n) => (n ? REASON_COLORS[n] || '#94a3b8' : '#cbd5e1');
const runColor = (i) => RUN_COLORS[i % RUN_COLORS.length];
function verdictRank(n) { const i = VERDICT_ORDER.indexOf(n); return i < 0 ? VERDICT_ORDER.length : i; }
function sortVerdicts(names) { return names.slice().sort((a, b) => verdictRank(a) - verdictRank(b) || (a < b ? -1 : a > b ? 1 : 0)); }
function mixWhite(hex, t) {  // hex colour moved towards white by t in [0, 1]
  const m = /^#([0-9a-f]{6})$/i.exec(hex);
  if (!m) return hex;
  const v = parseInt(m[1], 16), c = [(v >> 16) & 255, (v >> 8) & 255, v & 255].map((x) => Math.round(x + (255 - x) * t));
  return '#' + c.map((x) => x.toString(16).padStart(2, '0')).join('');
}

// DOM building: h('div', {class: 'x', text: 'y'}, child, ...)
function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) {
    const v = attrs[k];
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'html') e.innerHTML = v;
    else if (k === 'style') e.style.cssText = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids.flat()) if (c != null && c !== false) e.append(c instanceof Node ? c : String(c));
  return e;
}
function noData(host, text) { host.append(h('div', { class: 'nodata', text })); }
function legend(items) {  // items: [{color, label, kind}] kind: '' | 'ln' | 'tk' | 'tri' | 'short'
  return h('div', { class: 'legend' }, items.map((it) => it.sep
    ? h('span', { class: 'sep', text: '|' })
    : h('span', { class: it.color || it.kind ? null : 'mut' }, it.color || it.kind ? h('i', { class: it.kind || null, style: it.kind === 'tri' ? '' : 'background:' + it.color }) : null, it.label)));
}
function swatch(color) { return '<i class="sw" style="background:' + esc(color) + '"></i>'; }
function tipHtml(title, rows) {  // rows: [[key, value-html]]
  return '<b>' + title + '</b><table>' + rows.filter((r) => r).map((r) => '<tr><td class="k">' + esc(r[0]) + '</td><td>' + r[1] + '</td></tr>').join('') + '</table>';
}

function setupCanvas(cv, w, hgt) {  // devicePixelRatio-aware; returns a context in CSS pixels
  const dpr = window.devicePixelRatio || 1;
  cv.width = Math.max(1, Math.round(w * dpr));
  cv.height = Math.max(1, Math.round(hgt * dpr));
  cv.style.width = w + 'px';
  cv.style.height = hgt + 'px';
  const ctx = cv.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}
function hostWidth(el) { const w = el.clientWidth; return w > 120 ? w : 900; }
function fitText(ctx, s, maxW) {
  if (ctx.measureText(s).width <= maxW) return s;
  let lo = 0, hi = s.length;
  while (lo < hi) { const m = (lo + hi + 1) >> 1; if (ctx.measureText(s.slice(0, m) + '\u2026').width <= maxW) lo = m; else hi = m - 1; }
  return s.slice(0, lo) + '\u2026';
}

// The one tooltip, shared by canvases and by DOM elements carrying data-tip (HTML).
let tipEl = null, domTip = false;
function showTip(html, cx, cy) {
  if (!tipEl) { tipEl = h('div', { class: 'tip' }); document.body.append(tipEl); }
  tipEl.innerHTML = html;
  tipEl.style.display = 'block';
  const r = tipEl.getBoundingClientRect();
  let x = cx + 14, y = cy + 14;
  if (x + r.width > window.innerWidth - 6) x = cx - r.width - 14;
  if (y + r.height > window.innerHeight - 6) y = cy - r.height - 14;
  tipEl.style.left = Math.max(4, x) + 'px';
  tipEl.style.top = Math.max(4, y) + 'px';
}
function hideTip() { if (tipEl) tipEl.style.display = 'none'; }
document.addEventListener('mousemove', (e) => {
  const t = e.target && e.target.closest ? e.target.closest('[data-tip]') : null;
  if (t) { showTip(t.dataset.tip, e.clientX, e.clientY); domTip = true; } else if (domTip) { hideTip(); domTip = false; }
});

// Views that draw on canvas register a redraw for window resizes (one per view).
const redraws = {};
let resizeTimer = 0, lastWidth = window.innerWidth;
window.addEventListener('resize', () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => {
    if (window.innerWidth === lastWidth) return;
    lastWidth = window.innerWidth;
    for (const k in redraws) { try { redraws[k](); } catch (e) { noteError(k + ': ' + e.message); } }
  }, 150);
});

// Axis ticks
const TIME_STEPS = [1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
function timeTicks(a, b, px, spacing) {
  const want = Math.max(2, Math.floor(px / (spacing || 85))), span = Math.max(1e-9, b - a);
  let step = TIME_STEPS[TIME_STEPS.length - 1];
  for (const s of TIME_STEPS) if (span / s <= want) { step = s; break; }
  const v = [];
  for (let k = Math.ceil(a / step - 1e-9); k * step <= b + step * 1e-9 && v.length < 400; k++) v.push(k * step + 0);  // + 0: no -0
  const dec = step < 1 ? Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)) : 0;
  const fmt = step < 60 ? (t) => (dec ? t.toFixed(dec) : fmtInt(t)) + ' s'
    : step < 3600 ? (t) => fmtShort(t / 60) + ' min' : (t) => fmtShort(t / 3600) + ' h';
  return { v, fmt };
}
function logTicks(lo, hi, px) {  // nice values between lo and hi for a log axis, at most px/22 of them
  const maxN = Math.max(2, Math.floor(px / 22));
  const sets = [[1, 1.2, 1.5, 2, 3, 5, 7], [1, 2, 5], [1]];
  let out = [];
  for (const m of sets) {
    out = [];
    for (let e = Math.floor(Math.log10(lo)) - 1; e <= Math.ceil(Math.log10(hi)); e++) {
      for (const f of m) { const v = +(f * Math.pow(10, e)).toPrecision(6); if (v >= lo && v <= hi) out.push(v); }
    }
    if (out.length <= maxN) return out;
  }
  const step = Math.ceil(out.length / maxN);
  return out.filter((v, i) => i % step === 0 || v === 1);
}

// Finds the item under the mouse: items are kept per row in time buckets, so a lookup
// scans a few buckets of one row instead of every item.
class HitIndex {
  constructor(t0, t1, n) { this.t0 = t0; this.n = n || 1024; this.bw = Math.max(1e-12, (t1 - t0) / this.n); this.rows = new Map(); }
  bin(t) { const i = Math.floor((t - this.t0) / this.bw); return i < 0 ? 0 : i >= this.n ? this.n - 1 : i; }
  add(row, item) {  // item: {t0, t1, pri?}; pri 1 wins over items it lies in (markers on bars)
    let r = this.rows.get(row);
    if (!r) this.rows.set(row, (r = new Array(this.n)));
    for (let i = this.bin(item.t0), e = this.bin(item.t1); i <= e; i++) (r[i] || (r[i] = [])).push(item);
  }
  query(row, t, tol) {
    const r = this.rows.get(row);
    if (!r) return null;
    let best = null, bestScore = Infinity, bestLen = Infinity;
    for (let i = this.bin(t - tol), e = this.bin(t + tol); i <= e; i++) {
      const b = r[i];
      if (!b) continue;
      for (const it of b) {
        const d = t < it.t0 ? it.t0 - t : t > it.t1 ? t - it.t1 : 0;
        if (d > tol) continue;
        const score = d - (it.pri || 0) * tol, len = it.t1 - it.t0;
        if (score < bestScore || (score === bestScore && len < bestLen)) { best = it; bestScore = score; bestLen = len; }
      }
    }
    return best;
  }
}
// The row (of {y, h}, sorted by y) at height y, within 2 px.
function rowAt(rows, y) {
  let lo = 0, hi = rows.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (rows[m].y + rows[m].h < y - 2) lo = m + 1; else hi = m; }
  let best = null, bestD = 3;
  for (let i = lo; i < rows.length && rows[i].y <= y + 2; i++) {
    const r = rows[i], d = y < r.y ? r.y - y : y > r.y + r.h ? y - r.y - r.h : 0;
    if (d < bestD) { best = r; bestD = d; }
  }
  return best;
}
// Puts overlapping intervals (sorted by t0) on separate tracks; sets it.track, returns the track count.
function packTracks(items, minDur, maxTracks, slack) {
  const ends = [];
  for (const it of items) {
    let k = -1;
    for (let i = 0; i < ends.length; i++) if (ends[i] <= it.t0 + slack) { k = i; break; }
    if (k < 0) {
      if (ends.length < maxTracks) { k = ends.length; ends.push(-Infinity); }
      else { k = 0; for (let i = 1; i < ends.length; i++) if (ends[i] < ends[k]) k = i; }
    }
    it.track = k;
    ends[k] = Math.max(ends[k], it.t0 + Math.max(minDur, it.t1 - it.t0));
  }
  return Math.max(1, ends.length);
}
function valueAt(pts, t) {  // step function through [[t, v], ...] sorted by t; null before the first point
  let lo = 0, hi = pts.length;
  while (lo < hi) { const m = (lo + hi) >> 1; if (pts[m][0] <= t) lo = m + 1; else hi = m; }
  return lo === 0 ? null : pts[lo - 1][1];
}

// ---------------------------------------------------------------- 2. data
function load() {
  const el = document.getElementById('specgen-data');
  const text = el ? el.textContent.trim() : '';
  if (!text || text.startsWith('__SPECGEN')) return { error: 'This page holds no report data.', runs: [], tasks: [] };
  let raw;
  try { raw = JSON.parse(text); } catch (e) { return { error: 'The report data is not valid JSON: ' + e.message, runs: [], tasks: [] }; }
  raw = obj(raw);
  const runs = arr(raw.runs).filter((r) => r && typeof r === 'object' && !Array.isArray(r)).map(normRun);
  const tasks = [...new Set(runs.flatMap((r) => r.tasks))].sort();
  const tMax = Math.max(1, ...runs.map((r) => r.tEnd));
  const fmt = str(raw.format);
  return {
    runs, tasks, tMax, generatedBy: str(raw.generated_by), title: str(raw.title), format: fmt,
    error: runs.length ? (fmt && fmt !== 'specgen-report/1' ? 'The data is of format "' + fmt + '"; this page reads specgen-report/1, so some views may be empty.' : '') : 'The report holds no runs.',
  };
}
function names(a) { return arr(a).map((v, i) => str(v) || '#' + i); }
function counts(o) { const r = {}; for (const [k, v] of Object.entries(obj(o))) if (isNum(v) && v > 0) r[k] = v; return r; }
function normRun(r, i) {
  const run = {
    idx: i, color: runColor(i), label: str(r.label) || 'run ' + (i + 1), source: str(r.source),
    evaluator: str(r.evaluator) || null, summary: obj(r.summary),
    stages: names(r.stages), verdicts: names(r.verdicts), triggers: names(r.triggers), devices: names(r.devices),
  };
  run.jobs = [];
  for (const j of arr(r.jobs)) {
    if (!Array.isArray(j)) continue;
    let t0 = num(j[1]), t1 = num(j[2]);
    if (t0 === null && t1 === null) continue;
    if (t0 === null) t0 = t1;
    if (t1 === null) t1 = t0;
    if (t1 < t0) [t0, t1] = [t1, t0];
    run.jobs.push({ dev: idx(j[0]), t0, t1, stage: idx(j[3]), verdict: idx(j[4]), cand: num(j[5]), search: num(j[6]) });
  }
  run.searches = arr(r.searches).filter((s) => s && typeof s === 'object' && !Array.isArray(s)).map(normSearch);
  run.searches.sort((a, b) => a.id - b.id);
  run.searchById = new Map(run.searches.map((s) => [s.id, s]));
  run.tasks = [...new Set(run.searches.map((s) => s.task))];
  run.best = arr(r.best).filter((b) => b && typeof b === 'object' && !Array.isArray(b)).map((b) => ({
    task: str(b.task), search: num(b.search), candidate: num(b.candidate), speedup: num(b.speedup), t: num(b.t),
    source: typeof b.source === 'string' ? b.source : '', plan: typeof b.plan === 'string' ? b.plan : '',
  })).filter((b) => b.task);
  for (const b of run.best) if (!run.tasks.includes(b.task)) run.tasks.push(b.task);
  let t = num(run.summary.e2e_s) || 0;
  for (const j of run.jobs) if (j.t1 > t) t = j.t1;
  for (const s of run.searches) t = Math.max(t, s.tLast);
  run.tEnd = t > 0 ? t : 1;
  return run;
}
function normSearch(s, i) {
  const tup = (a, k) => arr(a).filter((x) => Array.isArray(x) && isNum(x[k]));
  const span = (x) => { let a = num(x[1]), b = num(x[2]); if (a === null) a = b; if (b === null) b = a; return a <= b ? [a, b] : [b, a]; };
  const out = {
    id: isNum(s.id) ? s.id : i, task: str(s.task) || 'search ' + i, endT: num(s.end_t), endReason: str(s.end_reason),
    bestSpeedup: num(s.best_speedup), best: num(s.best), rounds: num(s.rounds), tokens: num(s.tokens),
    forkCount: num(s.forks), termCount: num(s.terminations), candidates: num(s.candidates), verdicts: counts(s.verdicts),
    curve: arr(s.best_curve).filter((p) => Array.isArray(p) && isNum(p[0]) && isNum(p[1]) && p[1] > 0).map((p) => [p[0], p[1]]),
    streams: arr(s.streams).filter((x) => Array.isArray(x) && (isNum(x[1]) || isNum(x[2]))).map((x) => {
      const [t0, t1] = span(x);
      return { lane: Math.max(0, idx(x[0])), t0, t1, round: num(x[3]), reason: str(x[4]), tokens: num(x[5]), by: null };
    }),
    forks: arr(s.fork_spans).filter((x) => Array.isArray(x) && (isNum(x[1]) || isNum(x[2]))).map((x) => {
      const [t0, t1] = span(x);
      return { lane: Math.max(0, idx(x[0])), t0, t1, trigger: idx(x[3]), prefix: num(x[4]), samples: num(x[5]) };
    }),
    terms: tup(s.terminations_at, 0).map((x) => ({ t: x[0], lane: Math.max(0, idx(x[1])), by: num(x[2]) })),
    ends: tup(s.round_ends, 0).map((x) => ({ t: x[0], round: num(x[1]), reason: str(x[2]) })),
  };
  out.curve.sort((a, b) => a[0] - b[0]);
  out.streams.sort((a, b) => a.t0 - b.t0);
  out.forks.sort((a, b) => a.t0 - b.t0);
  if (out.forkCount === null) out.forkCount = out.forks.length;
  if (out.termCount === null) out.termCount = out.terms.length;
  if (out.rounds === null && (out.streams.length || out.ends.length)) out.rounds = Math.max(out.streams.length, out.ends.length);
  if (out.candidates === null) { const c = Object.values(out.verdicts).reduce((a, b) => a + b, 0); out.candidates = c || null; }
  if (out.bestSpeedup === null && out.curve.length) out.bestSpeedup = out.curve[out.curve.length - 1][1];
  let t = out.endT || 0;
  for (const x of out.streams) t = Math.max(t, x.t1);
  for (const x of out.forks) t = Math.max(t, x.t1);
  for (const x of out.terms) t = Math.max(t, x.t);
  for (const x of out.ends) t = Math.max(t, x.t);
  for (const p of out.curve) t = Math.max(t, p[0]);
  out.tLast = t;
  // Which candidate terminated each round (a termination lies at the end of its round).
  for (const tm of out.terms) {
    let best = null, bestD = Infinity;
    for (const st of out.streams) {
      if (st.lane !== tm.lane) continue;
      const d = tm.t < st.t0 ? st.t0 - tm.t : tm.t > st.t1 ? tm.t - st.t1 : 0;
      if (d < bestD) { best = st; bestD = d; }
      if (st.t0 > tm.t) break;
    }
    if (best && bestD < 1) { best.by = tm.by; tm.round = best.round; }
  }
  return out;
}
const stageName = (run, i) => run.stages[i] || (i < 0 ? 'unknown' : 'stage ' + i);
const verdictName = (run, i) => run.verdicts[i] || (i < 0 ? 'unknown' : 'verdict ' + i);
const triggerName = (run, i) => run.triggers[i] || (i < 0 ? 'unknown' : 'trigger ' + i);
const isCompileDevice = (name) => /^compile/i.test(name);
// The run's geomean of best speedups: the recorded one, else computed as the engine does
// (over searches; a search without a passing kernel counts as 1.0).
function runGeomean(run) {
  const g = num(run.summary.geomean);
  if (g !== null) return { v: g, derived: false };
  if (!run.searches.length) return { v: null, derived: false };
  let s = 0;
  for (const x of run.searches) s += Math.log(x.bestSpeedup > 0 ? x.bestSpeedup : 1);
  return { v: Math.exp(s / run.searches.length), derived: true };
}
function geomeanText(run) { const g = runGeomean(run); return fmtX(g.v) + (g.derived ? '*' : ''); }

// Best speedup so far of a task in a run: the searches' curves merged, as [[t, v], ...].
function taskCurve(run, task) {
  const pts = [];
  for (const s of run.searches) if (s.task === task) pts.push(...s.curve);
  pts.sort((a, b) => a[0] - b[0]);
  const out = [];
  for (const p of pts) if (!out.length || p[1] > out[out.length - 1][1]) out.push(p);
  if (!out.length) {  // no curve recorded: the best kernel alone, when its time is known
    for (const b of run.best) if (b.task === task && isNum(b.t) && b.speedup > 0 && (!out.length || b.speedup > out[0][1])) out[0] = [b.t, b.speedup];
  }
  return out;
}
function taskEnd(run, task) {
  let t = 0;
  for (const s of run.searches) if (s.task === task) t = Math.max(t, s.endT || s.tLast);
  return t || run.tEnd;
}
// Geometric mean over the run's tasks of the best speedup so far; a task counts as 1.0 until a kernel passes.
function geomeanCurve(run) {
  const tasks = run.searches.length ? [...new Set(run.searches.map((s) => s.task))] : [];
  if (!tasks.length) return [];
  const ev = [];
  for (const task of tasks) for (const p of taskCurve(run, task)) ev.push([p[0], task, p[1]]);
  ev.sort((a, b) => a[0] - b[0]);
  const cur = new Map();
  let logSum = 0;
  const out = [[0, 1]];
  for (const [t, task, v] of ev) {
    const old = cur.has(task) ? cur.get(task) : 1;
    logSum += Math.log(v) - Math.log(old);
    cur.set(task, v);
    const g = Math.exp(logSum / tasks.length);
    if (out.length && out[out.length - 1][0] === t) out[out.length - 1][1] = g; else out.push([t, g]);
  }
  return out;
}

// ---------------------------------------------------------------- 3. canvas widgets
// A zoomable time axis shared by the timelines of one view.
function makeZoom(tMax) {
  const z = { t0: 0, t1: tMax, tMax, subs: [] };
  z.set = (a, b) => {
    if (!(b > a)) { a = 0; b = tMax; }
    const minSpan = Math.max(tMax * 1e-6, 1e-6);
    if (b - a < minSpan) { const m = (a + b) / 2; a = m - minSpan / 2; b = m + minSpan / 2; }
    z.t0 = Math.max(0, a); z.t1 = Math.min(tMax, b);
    if (!(z.t1 > z.t0)) { z.t0 = 0; z.t1 = tMax; }
    for (const s of z.subs) s.draw();
  };
  return z;
}
// A timeline canvas. o: {zoom, height, labelW, rows: [{y, h, band, label, sub, labelY}],
//   paint(ctx, X, zoom) in plot coordinates, hover(t, y, tolT) -> {html, hl: {t0, t1, y, h}} | null,
//   gutter(ctx, labelW) optional, axis (default true)}.
function makeTimeline(host, o) {
  const labelW = o.labelW || 168, right = 14, top = 6, axisH = o.axis === false ? 6 : 24;
  const plotH = o.height, H = top + plotH + axisH, z = o.zoom;
  const wrap = h('div', { class: 'tl' }), base = h('canvas'), over = h('canvas', { class: 'tl-over' });
  wrap.append(base, over);
  host.append(wrap);
  let w = 0, bctx = null, octx = null, hover = null, drag = null, mouse = null;
  const pw = () => Math.max(10, w - labelW - right);
  const X = (t) => labelW + ((t - z.t0) / (z.t1 - z.t0)) * pw();
  const T = (x) => z.t0 + ((x - labelW) / pw()) * (z.t1 - z.t0);

  function draw() {
    const ctx = bctx;
    ctx.clearRect(0, 0, w, H);
    for (const r of o.rows) if (r.band) { ctx.fillStyle = r.band; ctx.fillRect(0, top + r.y, w, r.h); }
    const ticks = timeTicks(z.t0, z.t1, pw());
    ctx.strokeStyle = '#e9ecf1'; ctx.lineWidth = 1; ctx.beginPath();
    for (const t of ticks.v) { const x = Math.round(X(t)) + 0.5; ctx.moveTo(x, top); ctx.lineTo(x, top + plotH); }
    ctx.stroke();
    ctx.save(); ctx.beginPath(); ctx.rect(labelW, 0, pw() + 1, top + plotH); ctx.clip(); ctx.translate(0, top);
    o.paint(ctx, X, z);
    ctx.restore();
    ctx.save(); ctx.translate(0, top);
    ctx.textBaseline = 'middle'; ctx.textAlign = 'left';
    for (const r of o.rows) {
      if (!r.label && !r.sub) continue;
      const ly = r.labelY != null ? r.labelY : r.y + r.h / 2;
      const subs = [].concat(typeof r.sub === 'function' ? r.sub() : r.sub || []);
      if (r.small) {  // a lane label: right-aligned in the gutter
        ctx.font = '10px ' + FONT; ctx.fillStyle = '#6b7280'; ctx.textAlign = 'right';
        ctx.fillText(r.label, labelW - 8, ly); ctx.textAlign = 'left';
        continue;
      }
      const x0 = 12, maxW = (r.textW || labelW) - x0 - 8;
      const twoLines = subs.length && r.label && r.h >= 28;
      let x = x0;
      if (r.label) {
        ctx.font = '600 12px ' + FONT; ctx.fillStyle = '#111827';
        const s = fitText(ctx, r.label, maxW);
        ctx.fillText(s, x0, twoLines ? ly - 7 : ly);
        x += ctx.measureText(s).width + 6;
      }
      ctx.font = '11px ' + FONT; ctx.fillStyle = '#6b7280';
      if (twoLines || !r.label) {
        subs.forEach((s, i) => { const y = (r.label ? ly + 7 : ly) + 13 * i; if (y < r.y + r.h) ctx.fillText(fitText(ctx, s, maxW), x0, y); });
      } else if ((r.short || subs[0]) && x < x0 + maxW - 22) {
        ctx.fillText(fitText(ctx, r.short || subs[0], x0 + maxW - x), x, ly);
      }
    }
    if (o.gutter) o.gutter(ctx, labelW);
    ctx.restore();
    ctx.strokeStyle = '#d1d5db'; ctx.beginPath(); ctx.moveTo(labelW - 0.5, 0); ctx.lineTo(labelW - 0.5, top + plotH + 2); ctx.stroke();
    if (o.axis !== false) {
      ctx.beginPath(); ctx.moveTo(labelW, top + plotH + 0.5); ctx.lineTo(labelW + pw(), top + plotH + 0.5); ctx.stroke();
      ctx.font = '11px ' + FONT; ctx.fillStyle = '#6b7280'; ctx.textBaseline = 'top';
      for (const t of ticks.v) {
        const x = X(t);
        ctx.textAlign = x < labelW + 20 ? 'left' : x > labelW + pw() - 20 ? 'right' : 'center';
        ctx.fillText(ticks.fmt(t), x, top + plotH + 6);
      }
      if (z.t0 > 0 || z.t1 < z.tMax) {
        ctx.textAlign = 'left'; ctx.fillStyle = '#2563eb';
        ctx.fillText('zoomed: ' + fmtSec(z.t0) + ' ' + DASH + ' ' + fmtSec(z.t1) + ' (double-click to reset)', 12, top + plotH + 6);
      }
    }
    drawOver();
  }
  function drawOver() {
    const ctx = octx;
    ctx.clearRect(0, 0, w, H);
    if (drag) {
      const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
      ctx.fillStyle = 'rgba(37,99,235,0.14)'; ctx.fillRect(a, top, b - a, plotH);
      ctx.strokeStyle = 'rgba(37,99,235,0.7)'; ctx.strokeRect(a + 0.5, top + 0.5, b - a, plotH - 1);
      return;
    }
    if (mouse && mouse.x >= labelW) {
      const x = Math.round(mouse.x) + 0.5;
      ctx.strokeStyle = 'rgba(15,23,42,0.35)'; ctx.setLineDash([3, 3]);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + plotH); ctx.stroke(); ctx.setLineDash([]);
      if (o.axis !== false) {
        const s = fmtSec(T(mouse.x));
        ctx.font = '11px ' + FONT;
        const tw = ctx.measureText(s).width + 10, bx = clamp(x - tw / 2, labelW, w - tw);
        ctx.fillStyle = '#111827'; ctx.fillRect(bx, top + plotH + 3, tw, 17);
        ctx.fillStyle = '#fff'; ctx.textAlign = 'left'; ctx.textBaseline = 'top'; ctx.fillText(s, bx + 5, top + plotH + 6);
      }
    }
    if (hover && hover.hl) {
      const r = hover.hl, x0 = X(r.t0), x1 = Math.max(X(r.t1), x0 + 2);
      ctx.strokeStyle = '#0f172a'; ctx.lineWidth = 1.5;
      ctx.strokeRect(x0 - 1.5, top + r.y - 1.5, x1 - x0 + 3, r.h + 3);
      ctx.lineWidth = 1;
    }
  }
  function pos(e) { const r = over.getBoundingClientRect(); return { x: e.clientX - r.left, y: e.clientY - r.top }; }
  function endDrag() {
    if (!drag) return;
    const a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
    drag = null;
    if (b - a > 4) z.set(T(a), T(b)); else drawOver();
  }
  over.addEventListener('mousedown', (e) => {
    const p = pos(e);
    if (p.x < labelW || e.button !== 0) return;
    drag = { x0: p.x, x1: p.x }; hideTip(); e.preventDefault();
  });
  over.addEventListener('mouseup', endDrag);
  over.addEventListener('mousemove', (e) => {
    const p = pos(e);
    if (drag) { drag.x1 = clamp(p.x, labelW, labelW + pw()); drawOver(); return; }
    mouse = p; hover = null;
    if (p.x >= labelW && p.y >= top && p.y <= top + plotH) {
      const tol = (4 * (z.t1 - z.t0)) / pw();
      hover = o.hover ? o.hover(T(p.x), p.y - top, tol) : null;
    }
    if (hover) showTip(hover.html, e.clientX, e.clientY); else hideTip();
    drawOver();
  });
  over.addEventListener('mouseleave', () => { endDrag(); mouse = null; hover = null; hideTip(); drawOver(); });
  over.addEventListener('dblclick', () => z.set(0, z.tMax));
  function layout() { w = hostWidth(host); bctx = setupCanvas(base, w, H); octx = setupCanvas(over, w, H); draw(); }
  const tl = { layout, draw, plotWidth: () => pw() };
  z.subs.push(tl);
  layout();
  return tl;
}

// A speedup chart: step curves of best-so-far on a log y axis, with a dashed baseline at 1x.
// spec: {series: [{color, label, pts, endT}], tMax, lo, hi, dots}; hoverT: time under the mouse or null.
function drawSpeedChart(ctx, w, hgt, spec, hoverT) {
  const L = 46, R = spec.endLabels ? 58 : 12, Tp = 8, B = 22, pw = w - L - R, ph = hgt - Tp - B;
  ctx.clearRect(0, 0, w, hgt);
  const X = (t) => L + (clamp(t, 0, spec.tMax) / spec.tMax) * pw;
  const lnLo = Math.log(spec.lo), lnHi = Math.log(spec.hi);
  const Y = (v) => Tp + (1 - (Math.log(clamp(v, spec.lo, spec.hi)) - lnLo) / (lnHi - lnLo)) * ph;
  ctx.font = '11px ' + FONT; ctx.lineWidth = 1;
  ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
  for (const v of logTicks(spec.lo, spec.hi, ph)) {
    const y = Math.round(Y(v)) + 0.5;
    ctx.strokeStyle = '#eef0f3'; ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(L + pw, y); ctx.stroke();
    ctx.fillStyle = '#6b7280'; ctx.fillText(fmtShort(v) + TIMES, L - 6, y);
  }
  const tt = timeTicks(0, spec.tMax, pw, spec.tickSpacing);
  ctx.textBaseline = 'top';
  for (const t of tt.v) {
    const x = Math.round(X(t)) + 0.5;
    ctx.strokeStyle = '#f1f3f6'; ctx.beginPath(); ctx.moveTo(x, Tp); ctx.lineTo(x, Tp + ph); ctx.stroke();
    ctx.textAlign = x < L + 16 ? 'left' : x > L + pw - 16 ? 'right' : 'center';
    ctx.fillStyle = '#6b7280'; ctx.fillText(tt.fmt(t), x, Tp + ph + 5);
  }
  ctx.strokeStyle = '#d1d5db'; ctx.beginPath(); ctx.moveTo(L + 0.5, Tp); ctx.lineTo(L + 0.5, Tp + ph + 0.5); ctx.lineTo(L + pw, Tp + ph + 0.5); ctx.stroke();
  ctx.strokeStyle = '#6b7280'; ctx.setLineDash([5, 4]);
  const yb = Math.round(Y(1)) + 0.5;
  ctx.beginPath(); ctx.moveTo(L, yb); ctx.lineTo(L + pw, yb); ctx.stroke(); ctx.setLineDash([]);
  let drawn = 0;
  for (const s of spec.series) {
    if (!s.pts.length) continue;
    ctx.strokeStyle = s.color; ctx.lineWidth = 1.8; ctx.lineJoin = 'round';
    ctx.beginPath();
    let v = s.pts[0][1];
    ctx.moveTo(X(s.pts[0][0]), Y(v));
    for (let i = 1; i < s.pts.length; i++) { const x = X(s.pts[i][0]); ctx.lineTo(x, Y(v)); v = s.pts[i][1]; ctx.lineTo(x, Y(v)); }
    ctx.lineTo(X(Math.max(s.endT, s.pts[s.pts.length - 1][0])), Y(v));
    ctx.stroke();
    ctx.fillStyle = s.color;
    if (spec.dots && s.pts.length <= 300) for (const p of s.pts) { ctx.beginPath(); ctx.arc(X(p[0]), Y(p[1]), 2.2, 0, 7); ctx.fill(); }
    drawn += s.pts.length;
  }
  if (spec.endLabels) {  // the final value at the end of each curve, moved apart when they would overlap
    const labels = spec.series.filter((s) => s.pts.length).map((s) => {
      const v = s.pts[s.pts.length - 1][1];
      return { s, v, y: Y(v) };
    }).sort((a, b) => a.y - b.y);
    for (let i = 1; i < labels.length; i++) if (labels[i].y - labels[i - 1].y < 13) labels[i].y = labels[i - 1].y + 13;
    ctx.font = '600 11px ' + FONT; ctx.textBaseline = 'middle'; ctx.textAlign = 'left';
    for (const l of labels) { ctx.fillStyle = l.s.color; ctx.fillText(fmtX(l.v), L + pw + 6, clamp(l.y, Tp + 5, hgt - 8)); }
  }
  ctx.lineWidth = 1;
  if (hoverT != null) {
    const x = Math.round(X(hoverT)) + 0.5;
    ctx.strokeStyle = 'rgba(15,23,42,0.4)'; ctx.setLineDash([3, 3]);
    ctx.beginPath(); ctx.moveTo(x, Tp); ctx.lineTo(x, Tp + ph); ctx.stroke(); ctx.setLineDash([]);
    for (const s of spec.series) {
      const v = valueAt(s.pts, hoverT);
      if (v === null) continue;
      ctx.fillStyle = '#fff'; ctx.strokeStyle = s.color; ctx.lineWidth = 2;
      ctx.beginPath(); ctx.arc(x, Y(v), 3.5, 0, 7); ctx.fill(); ctx.stroke();
    }
    ctx.lineWidth = 1;
  }
  return { drawn, T: (x) => clamp(((x - L) / pw) * spec.tMax, 0, spec.tMax), inPlot: (x, y) => x >= L && x <= L + pw && y >= Tp - 4 && y <= Tp + ph + 4 };
}
// A speedup chart in a host element, redrawn on hover; tipTitle(t) gives the tooltip's title.
function speedChart(host, spec, hgt, tipTitle) {
  const cv = h('canvas');
  host.append(cv);
  let w = 0, ctx = null, geo = null;
  const draw = (ht) => { geo = drawSpeedChart(ctx, w, hgt, spec, ht); return geo.drawn; };
  const layout = () => { w = hostWidth(host) - 2; ctx = setupCanvas(cv, w, hgt); return draw(null); };
  cv.addEventListener('mousemove', (e) => {
    const r = cv.getBoundingClientRect(), x = e.clientX - r.left, y = e.clientY - r.top;
    if (!geo || !geo.inPlot(x, y)) { draw(null); hideTip(); return; }
    const t = geo.T(x);
    draw(t);
    const rows = spec.series.map((s) => {
      const v = valueAt(s.pts, t);
      return [' ', swatch(s.color) + esc(s.label) + ': ' + (v === null ? '<span class="k">no passing kernel yet</span>' : '<b>' + fmtX(v) + '</b>')];
    });
    showTip(tipHtml(esc(tipTitle(t)), rows), e.clientX, e.clientY);
  });
  cv.addEventListener('mouseleave', () => { draw(null); hideTip(); });
  return { layout };
}
function speedRange(series) {
  let lo = 1, hi = 1;
  for (const s of series) for (const p of s.pts) { lo = Math.min(lo, p[1]); hi = Math.max(hi, p[1]); }
  lo = Math.max(lo / 1.2, 1e-4);
  hi = Math.min(hi * 1.15, 1e6);
  if (hi / lo < 1.5) { const m = Math.sqrt(1.5 / (hi / lo)); lo /= m; hi *= m; }
  return { lo, hi };
}

// ---------------------------------------------------------------- 4. views
function sectionParts(id) {
  const sec = document.getElementById(id);
  return { sec, body: sec.querySelector('.vb'), ctl: sec.querySelector('.ctl') };
}
function setItems(sec, n) { sec.dataset.items = String(n); }
function runLegend(runs) { return legend(runs.map((r) => ({ color: r.color, label: r.label, kind: 'ln' }))); }
function runSelect(D, onChange) {
  const sel = h('select', { 'aria-label': 'run' }, D.runs.map((r, i) => h('option', { value: String(i), text: r.label })));
  sel.addEventListener('change', onChange);
  return sel;
}
function deltaSpan(v, base, higherIsBetter) {
  if (!isNum(v) || !isNum(base) || base === 0 || v === base) return null;
  const d = v / base - 1, good = higherIsBetter == null ? null : (d > 0) === higherIsBetter;
  return h('span', { class: 'delta ' + (good === null ? 'mut' : good ? 'up' : 'down'), text: (d > 0 ? '+' : '') + (d * 100).toFixed(Math.abs(d) < 0.1 ? 1 : 0) + '%' });
}

function renderHeader(D) {
  const chips = document.getElementById('hdr-runs');
  for (const r of D.runs) {
    const s = r.summary;
    chips.append(h('div', { class: 'chip', style: 'border-left-color:' + r.color },
      h('b', { text: r.label }),
      h('div', { class: 'cn' },
        runGeomean(r).v !== null ? h('span', { title: runGeomean(r).derived ? 'computed from the searches\' best speedups' : null }, 'geomean ', h('em', { text: geomeanText(r) })) : null,
        isNum(s.e2e_s) ? h('span', null, h('em', { text: fmtSec(s.e2e_s) })) : null,
        isNum(s.tokens) ? h('span', null, h('em', { text: fmtInt(s.tokens) }), ' tokens') : null,
        !isNum(s.e2e_s) && !isNum(s.tokens) ? h('span', { text: r.searches.length + ' searches' }) : null)));
  }
  if (D.title) {
    document.getElementById('hdr-title').textContent = D.title;
    document.title = D.title;
  }
  const nTasks = D.tasks.length;
  document.getElementById('hdr-sub').textContent = D.runs.length + (D.runs.length === 1 ? ' run' : ' runs') + DOT + nTasks + (nTasks === 1 ? ' task' : ' tasks');
  document.getElementById('hdr-gen').textContent = D.generatedBy ? 'made by ' + D.generatedBy : '';
  if (D.error) document.getElementById('banner').append(h('div', { class: 'banner', text: D.error }));
}

function renderSummary(D) {
  const { sec, body } = sectionParts('view-summary');
  if (!D.runs.length) { noData(body, 'No runs in this report.'); return; }
  const cols = [
    ['Run', null], ['Evaluator', null], ['End-to-end', 'n'], ['Geomean best speedup', 'n'], ['Tokens', 'n'],
    ['Kernels profiled', 'n'], ['Pool utilisation', 'n'], ['Stream failures', 'n'], ['Searches', 'n'], ['GPU jobs', 'n'], ['Forks', 'n'], ['Terminations', 'n'],
  ];
  const first = D.runs[0].summary;
  const rows = D.runs.map((r, i) => {
    const s = r.summary, forks = r.searches.reduce((a, x) => a + (x.forkCount || 0), 0), terms = r.searches.reduce((a, x) => a + (x.termCount || 0), 0);
    const cell = (text, v, base, better) => h('td', { class: 'n' }, text, i > 0 ? deltaSpan(v, base, better) : null);
    return h('tr', null,
      h('td', null, h('span', { class: 'sw', style: 'background:' + r.color }), h('b', { text: r.label }),
        r.source ? h('div', { class: 'mut small', text: r.source, title: r.source, style: 'max-width:320px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap' }) : null),
      h('td', { text: r.evaluator || DASH }),
      cell(fmtDur(num(s.e2e_s)), num(s.e2e_s), num(first.e2e_s), false),
      cell(geomeanText(r), runGeomean(r).v, runGeomean(D.runs[0]).v, true),
      cell(fmtInt(num(s.tokens)), num(s.tokens), num(first.tokens), null),
      cell(fmtInt(num(s.profiled)), num(s.profiled), num(first.profiled), null),
      h('td', { class: 'n', text: fmtPct(num(s.pool_utilization)) }),
      h('td', { class: 'n', text: fmtInt(num(s.stream_failures)) }),
      h('td', { class: 'n', text: fmtInt(r.searches.length) }),
      h('td', { class: 'n', text: fmtInt(r.jobs.length) }),
      h('td', { class: 'n', text: fmtInt(forks) }),
      h('td', { class: 'n', text: fmtInt(terms) }));
  });
  body.append(h('div', { style: 'overflow-x:auto' }, h('table', null,
    h('thead', null, h('tr', null, cols.map(([c, cls]) => h('th', { class: cls, text: c })))), h('tbody', null, rows))));
  if (D.runs.some((r) => runGeomean(r).derived)) body.append(h('p', { class: 'mut small', text: '* not recorded by the run; computed from its searches\' best speedups (a search without a passing kernel counts as 1' + TIMES + ').' }));
  setItems(sec, rows.length);
}

function renderSpeedup(D) {
  const { sec, body } = sectionParts('view-speedup');
  const charts = [];
  let items = 0;
  if (!D.runs.length) { noData(body, 'No runs in this report.'); return; }
  if (D.runs.length > 1) body.append(runLegend(D.runs));
  // Aggregate over tasks
  body.append(h('h3', null, 'All tasks: geometric mean of the best speedup so far',
    h('span', { class: 'lead', text: 'A task counts as 1' + TIMES + ' (the baseline) until its first kernel passes, so the end value matches the run\'s geomean.' })));
  const agg = D.runs.map((r) => ({ color: r.color, label: r.label, pts: geomeanCurve(r), endT: r.tEnd }));
  if (agg.some((s) => s.pts.length)) {
    const aggHost = h('div', { class: 'big' });
    body.append(aggHost);
    const spec = Object.assign({ series: agg, tMax: D.tMax, dots: false, endLabels: true }, speedRange(agg));
    charts.push(speedChart(aggHost, spec, 250, (t) => 'geomean at ' + fmtSec(t)));
  } else noData(body, 'No searches in this report.');
  // One chart per task
  body.append(h('h3', null, 'Per task', h('span', { class: 'lead', text: D.runs.length > 1 ? 'Same time axis in every chart; the values are each run\'s final best.' : 'Same time axis in every chart; the value is the final best.' })));
  if (!D.tasks.length) { noData(body, 'No tasks in this report.'); }
  const grid = h('div', { class: 'grid' });
  body.append(grid);
  const cards = [];
  for (const task of D.tasks) {
    const series = D.runs.map((r) => ({ color: r.color, label: r.label, pts: taskCurve(r, task), endT: taskEnd(r, task), has: r.tasks.includes(task) }));
    const vals = h('span', { class: 'sm-v' }, series.filter((s) => s.has).map((s) => {
      const last = s.pts.length ? s.pts[s.pts.length - 1][1] : null;
      return h('span', { style: 'color:' + s.color, title: s.label, text: last === null ? 'none' : fmtX(last) });
    }));
    const card = h('div', { class: 'sm' }, h('div', { class: 'sm-h' }, h('b', { text: task, title: task }), vals));
    grid.append(card);
    cards.push({ card, series, task });
  }
  for (const c of cards) {  // layout after all cards are in the page: one reflow
    if (!c.series.some((s) => s.pts.length)) { c.card.append(h('div', { class: 'nodata small', style: 'margin:6px 0 8px', text: 'no passing kernel' })); continue; }
    const spec = Object.assign({ series: c.series.filter((s) => s.has), tMax: D.tMax, dots: true, tickSpacing: 60 }, speedRange(c.series));
    charts.push(speedChart(c.card, spec, 150, (t) => c.task + ' at ' + fmtSec(t)));
  }
  for (const ch of charts) items += ch.layout();
  redraws.speedup = () => { for (const ch of charts) ch.layout(); };
  setItems(sec, items);
}

// Streams: one group of rows per search: per lane a main row (rounds) and fork tracks.
function streamLayout(run, searches, single, plotW) {
  const tMax = run.tEnd;
  const d = single ? { main: 22, track: 7, gap: 2, maxTracks: 14, pad: 10 }
    : searches.length > 60 ? { main: 7, track: 3, gap: 1, maxTracks: 1, pad: 3 } : { main: 12, track: 4, gap: 1, maxTracks: 3, pad: 6 };
  const minDur = (3 * tMax) / Math.max(100, plotW);
  const hit = new HitIndex(0, tMax, 1024);
  const rows = [], sub = [], rounds = [], forks = [], terms = [], ends = [], jobs = [];
  let y = 0;
  searches.forEach((s, si) => {
    const g = { y, band: si % 2 ? '#f8fafc' : null, label: s.task, sub: '#' + s.id + DOT + (s.rounds == null ? '?' : s.rounds) + ' rounds' + DOT + fmtX(s.bestSpeedup), short: '#' + s.id + DOT + fmtX(s.bestSpeedup) };
    y += d.pad;
    const lanes = [...new Set([...s.streams.map((x) => x.lane), ...s.forks.map((x) => x.lane), ...s.terms.map((x) => x.lane)])].sort((a, b) => a - b);
    if (!lanes.length) lanes.push(0);
    if (lanes.length > 1) g.textW = 110;  // leave room for the lane labels on the right of the gutter
    for (const lane of lanes) {
      const mainRow = { y, h: d.main, id: sub.length };
      sub.push(mainRow);
      if (lanes.length > 1) rows.push({ y, h: d.main, label: 'lane ' + lane, small: true });
      for (const st of s.streams) if (st.lane === lane) {
        const it = { k: 'round', t0: st.t0, t1: st.t1, y, h: d.main, s, st, color: reasonColor(st.reason) };
        rounds.push(it); hit.add(mainRow.id, it);
      }
      for (const tm of s.terms) if (tm.lane === lane) {
        const it = { k: 'term', t0: tm.t, t1: tm.t, y, h: d.main, s, tm, pri: 1 };
        terms.push(it); hit.add(mainRow.id, it);
      }
      y += d.main + d.gap;
      const lf = s.forks.filter((f) => f.lane === lane).map((f) => ({ k: 'fork', t0: f.t0, t1: f.t1, s, f, color: triggerColor(triggerName(run, f.trigger)) }));
      if (lf.length) {
        const n = packTracks(lf, minDur, d.maxTracks, 0), base = sub.length;
        for (let k = 0; k < n; k++) sub.push({ y: y + k * (d.track + d.gap), h: d.track, id: base + k });
        for (const it of lf) { it.y = y + it.track * (d.track + d.gap); it.h = d.track; forks.push(it); hit.add(base + it.track, it); }
        y += n * (d.track + d.gap);
      }
    }
    if (single) {  // the search's jobs, to see when kernels came back
      const sj = run.jobs.filter((j) => j.search === s.id).map((j) => ({ k: 'job', t0: j.t0, t1: j.t1, j }));
      if (sj.length) {
        sj.sort((a, b) => a.t0 - b.t0);
        y += 6;
        const n = packTracks(sj, minDur, 6, 0), base = sub.length, th = 8;
        rows.push({ y, h: n * (th + 1), label: 'jobs', small: true });
        for (let k = 0; k < n; k++) sub.push({ y: y + k * (th + 1), h: th, id: base + k });
        for (const it of sj) { it.y = y + it.track * (th + 1); it.h = th; it.color = jobColor(run, it.j); jobs.push(it); hit.add(base + it.track, it); }
        y += n * (th + 1);
      }
    }
    y += d.pad;
    g.h = y - g.y;
    g.labelY = g.y + d.pad + Math.min(g.h - 2 * d.pad, 30) / 2;
    if (g.h >= 24) g.labelY = Math.max(g.labelY, g.y + 16);
    rows.unshift(g);
    for (const e of s.ends) ends.push({ t: e.t, y0: g.y + 2, y1: y - 2 });
  });
  // Painting order: group by colour so each colour is set once.
  const byColor = (list) => { const m = new Map(); for (const it of list) { if (!m.has(it.color)) m.set(it.color, []); m.get(it.color).push(it); } return m; };
  return { height: Math.max(y, 20), rows, sub, hit, rounds: byColor(rounds), forks: byColor(forks), jobs: byColor(jobs), terms, ends, count: rounds.length + forks.length + terms.length + jobs.length };
}
function fillBars(ctx, groups, X, left, right, gapPx, minW) {
  for (const [color, list] of groups) {
    ctx.fillStyle = color;
    for (const it of list) {
      const x0 = X(it.t0), x1 = X(it.t1);
      if (x1 < left - 2 || x0 > right + 2) continue;
      let w = x1 - x0;
      if (w > 4 * gapPx) w -= gapPx;
      ctx.fillRect(x0, it.y, Math.max(minW, w), it.h);
    }
  }
}
function streamTip(run, it) {
  const s = it.s, head = esc(s.task) + ' <span class="k">search #' + esc(s.id) + '</span>';
  if (it.k === 'round') {
    const st = it.st;
    return tipHtml(head, [
      ['round', esc(st.round == null ? '?' : st.round) + ' <span class="k">lane ' + st.lane + '</span>'],
      ['time', fmtSec(st.t0) + ' ' + DASH + ' ' + fmtSec(st.t1) + ' <span class="k">(' + fmtSec(st.t1 - st.t0) + ')</span>'],
      ['ended', swatch(reasonColor(st.reason)) + esc(st.reason || 'not recorded')],
      st.by != null ? ['terminated by', 'candidate #' + esc(st.by)] : null,
      st.tokens != null ? ['tokens', fmtInt(st.tokens)] : ['search tokens', fmtInt(s.tokens) + ' <span class="k">(all rounds)</span>'],
    ]);
  }
  if (it.k === 'fork') {
    const f = it.f, trig = triggerName(run, f.trigger);
    return tipHtml('fork' + DOT + head, [
      ['trigger', swatch(triggerColor(trig)) + esc(trig)],
      ['started', fmtSec(f.t0) + ' <span class="k">lane ' + f.lane + '</span>'],
      ['ended', f.t1 > f.t0 ? fmtSec(f.t1) + ' <span class="k">(' + fmtSec(f.t1 - f.t0) + ')</span>' : '<span class="k">not recorded</span>'],
      ['prefix tokens', fmtInt(f.prefix)],
      ['samples', fmtInt(f.samples)],
    ]);
  }
  if (it.k === 'term') {
    const tm = it.tm;
    return tipHtml('termination' + DOT + head, [
      ['time', fmtSec(tm.t) + ' <span class="k">lane ' + tm.lane + '</span>'],
      tm.round != null ? ['round', esc(tm.round)] : null,
      ['terminated by', tm.by ? 'candidate #' + esc(tm.by) : '<span class="k">not recorded</span>'],
    ]);
  }
  return jobTip(run, it.j);
}
function jobColor(run, j) {
  const c = verdictColor(verdictName(run, j.verdict));
  return stageName(run, j.stage) === 'compile' ? mixWhite(c, 0.45) : c;
}
function jobTip(run, j) {
  const s = j.search != null ? run.searchById.get(j.search) : null, v = verdictName(run, j.verdict);
  const dev = run.devices[j.dev] || (j.dev < 0 ? 'unknown device' : 'device ' + j.dev);
  return tipHtml(esc(stageName(run, j.stage)) + DOT + swatch(verdictColor(v)) + esc(v), [
    ['candidate', j.cand != null ? '#' + esc(j.cand) : DASH],
    ['search', j.search != null ? '#' + esc(j.search) + (s ? ' ' + esc(s.task) : '') : DASH],
    ['device', esc(dev)],
    ['time', fmtSec(j.t0) + ' ' + DASH + ' ' + fmtSec(j.t1) + ' <span class="k">(' + fmtSec(j.t1 - j.t0) + ')</span>'],
  ]);
}
function renderStreams(D) {
  const { sec, body, ctl } = sectionParts('view-streams');
  if (!D.runs.some((r) => r.searches.length)) { noData(body, 'No searches in this report.'); return; }
  const runSel = runSelect(D, () => { fillSearches(); draw(); });
  const searchSel = h('select', { 'aria-label': 'search', onchange: () => draw() });
  if (D.runs.length > 1) ctl.append(h('label', null, 'Run', runSel));
  ctl.append(h('label', null, 'Search', searchSel));
  const legendHost = h('div'), host = h('div', { class: 'tscroll' });
  body.append(legendHost, host);
  function fillSearches() {
    const run = D.runs[+runSel.value] || D.runs[0];
    searchSel.replaceChildren(h('option', { value: 'all', text: 'All searches (' + run.searches.length + ')' }),
      ...run.searches.map((s) => h('option', { value: String(s.id), text: '#' + s.id + ' ' + s.task })));
  }
  function draw() {
    const run = D.runs[+runSel.value] || D.runs[0];
    const single = searchSel.value !== 'all';
    const searches = single ? run.searches.filter((s) => String(s.id) === searchSel.value) : run.searches;
    host.replaceChildren(); legendHost.replaceChildren();
    if (!searches.length) { noData(host, 'This run has no searches.'); setItems(sec, 0); return; }
    legendHost.append(streamLegend(run, searches, single));
    const L = streamLayout(run, searches, single, hostWidth(host) - 182);
    const zoom = makeZoom(run.tEnd);
    const tl = makeTimeline(host, {
      zoom, height: L.height, rows: L.rows,
      paint(ctx, X, z) {
        const left = X(z.t0), right = X(z.t1);
        fillBars(ctx, L.rounds, X, left, right, 1, 1.5);
        fillBars(ctx, L.forks, X, left, right, 0, 2);
        fillBars(ctx, L.jobs, X, left, right, 0, 1.5);
        ctx.strokeStyle = 'rgba(15,23,42,0.4)'; ctx.lineWidth = 1; ctx.beginPath();
        for (const e of L.ends) { const x = Math.round(X(e.t)) + 0.5; if (x < left - 1 || x > right + 1) continue; ctx.moveTo(x, e.y0); ctx.lineTo(x, e.y1); }
        ctx.stroke();
        ctx.fillStyle = '#111827'; ctx.strokeStyle = '#fff'; ctx.beginPath();
        for (const it of L.terms) {
          const x = X(it.t0), s = Math.min(5, it.h / 2 + 1);
          if (x < left - 6 || x > right + 6) continue;
          ctx.moveTo(x - s, it.y - 1); ctx.lineTo(x + s, it.y - 1); ctx.lineTo(x, it.y + s + 1); ctx.closePath();
        }
        ctx.fill(); ctx.stroke();
      },
      hover(t, y, tol) {
        const r = rowAt(L.sub, y);
        const it = r ? L.hit.query(r.id, t, tol) : null;
        return it ? { html: streamTip(run, it), hl: { t0: it.t0, t1: it.t1, y: it.y, h: it.h } } : null;
      },
    });
    redraws.streams = () => tl.layout();
    setItems(sec, L.count);
  }
  fillSearches();
  draw();
}
function streamLegend(run, searches, single) {
  const reasons = new Set(), trig = new Set();
  for (const s of searches) { for (const st of s.streams) reasons.add(st.reason); for (const f of s.forks) trig.add(triggerName(run, f.trigger)); }
  const items = [...reasons].sort().map((r) => ({ color: reasonColor(r), label: 'round ended: ' + (r || 'not recorded') }));
  items.push({ kind: 'tri', label: 'termination' }, { kind: 'tk', color: 'rgba(15,23,42,0.5)', label: 'round end' });
  if (trig.size) { items.push({ sep: true }); for (const t of [...trig].sort()) items.push({ color: triggerColor(t), label: 'fork: ' + t, kind: 'short' }); }
  else items.push({ sep: true }, { label: 'no forks in this run' });
  if (single) items.push({ sep: true }, { color: '#9ca3af', label: 'jobs: coloured by verdict (see Devices)' });
  return legend(items);
}

// Devices: one row per device (tracks when its jobs overlap), then GPU busy share over time.
function gpuLayout(run) {
  const devNames = run.devices.slice();
  const byDev = new Map();
  for (const j of run.jobs) {
    let d = j.dev;
    if (d < 0 || d >= devNames.length) {
      const name = d < 0 ? 'unknown device' : 'device ' + d;
      d = devNames.indexOf(name);
      if (d < 0) { d = devNames.length; devNames.push(name); }
    }
    if (!byDev.has(d)) byDev.set(d, []);
    byDev.get(d).push({ t0: j.t0, t1: j.t1, j });
  }
  const order = [...byDev.keys()].sort((a, b) => a - b);
  let nTracks = 0;
  const packed = order.map((d) => {
    const list = byDev.get(d);
    list.sort((a, b) => a.t0 - b.t0);
    const n = packTracks(list, 0, 32, 1e-3);
    nTracks += n;
    return { d, list, n };
  });
  const th = nTracks > 24 ? 8 : nTracks > 12 ? 12 : nTracks > 6 ? 16 : 22, gap = 6;
  const hit = new HitIndex(0, run.tEnd, 1024);
  const rows = [], sub = [], groups = new Map(), gpuJobs = [];
  let y = 0, gpuTracks = 0;
  packed.forEach(({ d, list, n }, gi) => {
    const name = devNames[d], compile = isCompileDevice(name);
    y += gap / 2;
    let busy = 0;
    for (const it of list) busy += it.t1 - it.t0;
    const rowH = n * th + (n - 1);
    rows.push({ y: y - gap / 2, h: rowH + gap, band: gi % 2 ? '#f8fafc' : null, label: name, labelY: y + Math.min(rowH, 30) / 2,
      sub: [fmtInt(list.length) + ' jobs' + DOT + fmtPct(busy / (run.tEnd * n)) + ' busy'].concat(n > 1 ? [n + ' tracks (jobs overlap)'] : []) });
    for (let k = 0; k < n; k++) sub.push({ y: y + k * (th + 1), h: th, id: sub.length });
    const base = sub.length - n;
    for (const it of list) {
      const stage = stageName(run, it.j.stage), full = stage !== 'validate';
      it.y = y + it.track * (th + 1) + (full ? 0 : th * 0.45);
      it.h = full ? th : th * 0.55;
      it.color = jobColor(run, it.j);
      if (!groups.has(it.color)) groups.set(it.color, []);
      groups.get(it.color).push(it);
      hit.add(base + it.track, it);
      if (!compile) gpuJobs.push(it);
    }
    if (!compile) gpuTracks += n;
    y += rowH + gap / 2;
  });
  return { height: Math.max(y, 20), rows, sub, hit, groups, gpuJobs, gpuTracks, count: run.jobs.length };
}
// Busy share of the GPU rows in nb bins over [a, b]: a job adds its overlap with each bin.
function utilBins(jobs, tracks, a, b, nb) {
  const bw = (b - a) / nb, full = new Float64Array(nb + 1), part = new Float64Array(nb), out = new Float64Array(nb);
  for (const it of jobs) {
    const s = Math.max(it.t0, a), e = Math.min(it.t1, b);
    if (!(e > s)) continue;
    const i0 = Math.min(nb - 1, Math.floor((s - a) / bw)), i1 = Math.min(nb - 1, Math.floor((e - a) / bw));
    if (i0 === i1) { part[i0] += e - s; continue; }
    part[i0] += a + (i0 + 1) * bw - s;
    part[i1] += e - (a + i1 * bw);
    full[i0 + 1] += 1; full[i1] -= 1;
  }
  let c = 0;
  for (let i = 0; i < nb; i++) { c += full[i]; out[i] = Math.min(1, (part[i] + c * bw) / (bw * tracks)); }
  return out;
}
function renderGpus(D) {
  const { sec, body, ctl } = sectionParts('view-gpus');
  if (!D.runs.some((r) => r.jobs.length)) { noData(body, 'No evaluation jobs in this report.'); return; }
  const runSel = runSelect(D, () => draw());
  if (D.runs.length > 1) ctl.append(h('label', null, 'Run', runSel));
  const legendHost = h('div'), host = h('div');
  body.append(legendHost, host);
  function draw() {
    const run = D.runs[+runSel.value] || D.runs[0];
    host.replaceChildren(); legendHost.replaceChildren();
    if (!run.jobs.length) { noData(host, 'This run has no evaluation jobs.'); setItems(sec, 0); return; }
    const vs = sortVerdicts([...new Set(run.jobs.map((j) => verdictName(run, j.verdict)))]);
    legendHost.append(legend([...vs.map((v) => ({ color: verdictColor(v), label: v })), { sep: true },
      { color: '#16a34a', label: 'profile (full height)' }, { color: '#16a34a', label: 'validate (lower half)', kind: 'short' },
      { color: mixWhite('#16a34a', 0.45), label: 'compile (pale)' }]));
    const L = gpuLayout(run);
    const zoom = makeZoom(run.tEnd);
    const tl = makeTimeline(host, {
      zoom, height: L.height, rows: L.rows,
      paint(ctx, X, z) { fillBars(ctx, L.groups, X, X(z.t0), X(z.t1), 0, 1); },
      hover(t, y, tol) {
        const r = rowAt(L.sub, y), it = r ? L.hit.query(r.id, t, tol) : null;
        return it ? { html: jobTip(run, it.j), hl: { t0: it.t0, t1: it.t1, y: it.y, h: it.h } } : null;
      },
    });
    const timelines = [tl];
    host.append(h('h3', null, 'GPU busy share', h('span', { class: 'lead', text: L.gpuTracks ? 'Fraction of the ' + L.gpuTracks + ' GPU row(s) busy, in 400 bins over the time shown.' : '' })));
    if (L.gpuTracks) timelines.push(utilTimeline(host, zoom, L));
    else noData(host, 'No jobs ran on a GPU row.');
    redraws.gpus = () => { for (const t of timelines) t.layout(); };
    setItems(sec, L.count);
  }
  draw();
}
function utilTimeline(host, zoom, L) {
  const NB = 400, hgt = 90;
  let cache = null;
  const bins = () => {
    if (!cache || cache.t0 !== zoom.t0 || cache.t1 !== zoom.t1) {
      const v = utilBins(L.gpuJobs, L.gpuTracks, zoom.t0, zoom.t1, NB);
      let m = 0;
      for (const x of v) m += x;
      cache = { t0: zoom.t0, t1: zoom.t1, v, mean: m / NB };
    }
    return cache;
  };
  return makeTimeline(host, {
    zoom, height: hgt,
    rows: [{ y: 0, h: hgt, label: 'GPU busy', sub: () => 'mean ' + fmtPct(bins().mean), labelY: 22 }],
    paint(ctx, X, z) {
      const c = bins(), bw = (z.t1 - z.t0) / NB, Y = (f) => hgt - 2 - f * (hgt - 8);
      ctx.strokeStyle = '#eef0f3'; ctx.beginPath();
      for (const f of [0.25, 0.5, 0.75, 1]) { const y = Math.round(Y(f)) + 0.5; ctx.moveTo(X(z.t0), y); ctx.lineTo(X(z.t1), y); }
      ctx.stroke();
      ctx.beginPath(); ctx.moveTo(X(z.t0), Y(0));
      for (let i = 0; i < NB; i++) { ctx.lineTo(X(z.t0 + i * bw), Y(c.v[i])); ctx.lineTo(X(z.t0 + (i + 1) * bw), Y(c.v[i])); }
      ctx.lineTo(X(z.t1), Y(0)); ctx.closePath();
      ctx.fillStyle = 'rgba(37,99,235,0.22)'; ctx.fill();
      ctx.strokeStyle = '#2563eb'; ctx.lineWidth = 1.2; ctx.stroke(); ctx.lineWidth = 1;
    },
    gutter(ctx, labelW) {
      ctx.font = '10px ' + FONT; ctx.fillStyle = '#9ca3af'; ctx.textAlign = 'right';
      for (const f of [0, 0.5, 1]) ctx.fillText(f * 100 + '%', labelW - 6, hgt - 2 - f * (hgt - 8));
    },
    hover(t) {
      const c = bins(), bw = (zoom.t1 - zoom.t0) / NB, i = clamp(Math.floor((t - zoom.t0) / bw), 0, NB - 1);
      const a = zoom.t0 + i * bw, f = c.v[i];
      return {
        html: tipHtml('GPU busy ' + fmtPct(f), [['time', fmtSec(a) + ' ' + DASH + ' ' + fmtSec(a + bw)], ['busy rows', (f * L.gpuTracks).toFixed(2) + ' of ' + L.gpuTracks]]),
        hl: { t0: a, t1: a + bw, y: hgt - 2 - f * (hgt - 8), h: f * (hgt - 8) },
      };
    },
  });
}

function renderVerdicts(D) {
  const { sec, body } = sectionParts('view-verdicts');
  const per = new Map();  // task -> [counts per run]
  const all = new Set();
  for (const task of D.tasks) per.set(task, D.runs.map(() => ({})));
  D.runs.forEach((r, ri) => {
    for (const s of r.searches) {
      const c = per.get(s.task)[ri];
      for (const [v, n] of Object.entries(s.verdicts)) { c[v] = (c[v] || 0) + n; all.add(v); }
    }
  });
  if (!all.size) { noData(body, 'No candidate verdicts in this report.'); return; }
  const order = sortVerdicts([...all]);
  body.append(legend(order.map((v) => ({ color: verdictColor(v), label: v }))));
  let max = 1, segs = 0;
  for (const list of per.values()) for (const c of list) max = Math.max(max, Object.values(c).reduce((a, b) => a + b, 0));
  for (const [task, list] of per) {
    list.forEach((c, ri) => {
      const run = D.runs[ri];
      if (!run.tasks.includes(task)) return;
      const total = Object.values(c).reduce((a, b) => a + b, 0);
      const bar = h('div', { class: 'vbar', style: 'width:' + ((100 * total) / max).toFixed(2) + '%' });
      for (const v of order) {
        const n = c[v];
        if (!n) continue;
        segs++;
        bar.append(h('span', { style: 'flex:' + n + ' 0 0;background:' + verdictColor(v),
          'data-tip': tipHtml(esc(task) + DOT + esc(run.label), [['verdict', swatch(verdictColor(v)) + esc(v)], ['candidates', fmtInt(n) + ' of ' + fmtInt(total) + ' (' + fmtPct(n / total) + ')']]) }));
      }
      const multi = D.runs.length > 1, firstOfTask = !list.slice(0, ri).some((x, k) => D.runs[k].tasks.includes(task));
      body.append(h('div', { class: 'vrow' + (multi ? '' : ' one') + (firstOfTask ? ' first' : '') },
        h('div', { class: 't', text: firstOfTask ? task : '', title: task }),
        multi ? h('div', { class: 'r' }, h('span', { class: 'sw', style: 'background:' + run.color }), run.label) : null,
        h('div', { class: 'vtrack' }, bar),
        h('div', { class: 'n small', text: total ? fmtInt(total) : 'none' })));
    });
  }
  setItems(sec, segs);
}

function renderTokens(D) {
  const { sec, body } = sectionParts('view-tokens');
  if (!D.tasks.length) { noData(body, 'No searches in this report.'); return; }
  const multi = D.runs.length > 1;
  const cols = [
    { key: 'tokens', label: 'Tokens', bar: true }, { key: 'forks', label: 'Forks', bar: true }, { key: 'terms', label: 'Terminations' },
    { key: 'cands', label: 'Candidates' }, { key: 'rounds', label: 'Rounds' }, { key: 'searches', label: 'Searches' }, { key: 'perCand', label: 'Tokens / candidate' },
  ];
  const stat = (run, task) => {
    const o = { tokens: 0, forks: 0, terms: 0, cands: 0, rounds: 0, searches: 0, perCand: null };
    for (const s of run.searches) if (s.task === task) {
      o.tokens += s.tokens || 0; o.forks += s.forkCount || 0; o.terms += s.termCount || 0;
      o.cands += s.candidates || 0; o.rounds += s.rounds || 0; o.searches++;
    }
    o.perCand = o.cands ? o.tokens / o.cands : null;
    return o;
  };
  const data = D.tasks.map((task) => ({ task, per: D.runs.map((r) => (r.tasks.includes(task) ? stat(r, task) : null)) }));
  const maxOf = {};
  for (const c of cols) maxOf[c.key] = Math.max(1, ...data.flatMap((d) => d.per.map((p) => (p && isNum(p[c.key]) ? p[c.key] : 0))));
  let sortKey = null, desc = true;
  const table = h('table'), head = h('thead'), tb = h('tbody'), foot = h('tfoot');
  table.append(head, tb, foot);
  body.append(h('div', { class: 'tscroll' }, table));
  const cellsFor = (p) => cols.map((c) => {
    const v = p ? p[c.key] : null;
    const text = c.key === 'perCand' ? (isNum(v) ? fmtInt(v) : DASH) : fmtInt(v);
    if (!c.bar || !isNum(v)) return h('td', { class: 'n', text });
    return h('td', { class: 'n' }, h('div', { class: 'cellbar' }, text, h('div', { class: 'b', style: 'width:' + Math.round((60 * v) / maxOf[c.key]) + 'px' })));
  });
  function fill() {
    const rows = data.slice();
    if (sortKey) {
      const key = (d) => d.per.reduce((a, p) => a + (p && isNum(p[sortKey]) ? p[sortKey] : 0), 0);
      rows.sort((a, b) => (desc ? key(b) - key(a) : key(a) - key(b)) || (a.task < b.task ? -1 : 1));
    }
    head.replaceChildren(h('tr', null, h('th', { class: 'sortable', text: 'Task', onclick: () => setSort(null) }, sortKey ? null : h('span', { class: 'arr', text: '\u2191' })),
      multi ? h('th', { text: 'Run' }) : null,
      cols.map((c) => h('th', { class: 'n sortable', onclick: () => setSort(c.key) }, c.label, sortKey === c.key ? h('span', { class: 'arr', text: desc ? '\u2193' : '\u2191' }) : null))));
    const trs = [];
    for (const d of rows) {
      const present = D.runs.map((r, i) => i).filter((i) => d.per[i]);
      present.forEach((ri, k) => {
        const run = D.runs[ri];
        trs.push(h('tr', { class: k === 0 ? 'grp' : null },
          k === 0 ? h('td', { rowspan: String(present.length) }, h('b', { text: d.task })) : null,
          multi ? h('td', null, h('span', { class: 'sw', style: 'background:' + run.color }), run.label) : null,
          cellsFor(d.per[ri])));
      });
    }
    tb.replaceChildren(...trs);
    foot.replaceChildren(...D.runs.map((r) => {
      const t = { tokens: 0, forks: 0, terms: 0, cands: 0, rounds: 0, searches: 0 };
      for (const d of data) { const p = d.per[r.idx]; if (p) for (const k in t) t[k] += p[k]; }
      t.perCand = t.cands ? t.tokens / t.cands : null;
      return h('tr', null, h('td', { text: 'All tasks' }), multi ? h('td', null, h('span', { class: 'sw', style: 'background:' + r.color }), r.label) : null,
        cols.map((c) => h('td', { class: 'n', text: c.key === 'perCand' ? (isNum(t.perCand) ? fmtInt(t.perCand) : DASH) : fmtInt(t[c.key]) })));
    }));
    setItems(sec, trs.length);
  }
  function setSort(k) { if (sortKey === k && k) desc = !desc; else { sortKey = k; desc = true; } fill(); }
  fill();
}

function renderBest(D) {
  const { sec, body } = sectionParts('view-best');
  const rows = [];
  let found = 0;
  for (const task of D.tasks) {
    const entries = [];
    for (const r of D.runs) {
      if (!r.tasks.includes(task)) continue;
      entries.push({ run: r, b: bestOf(r, task) });
    }
    let top = null;
    for (const e of entries) if (e.b && isNum(e.b.speedup) && (!top || e.b.speedup > top.b.speedup)) top = e;
    entries.forEach((e, k) => rows.push({ task, first: k === 0, span: entries.length, top: D.runs.length > 1 && e === top, ...e }));
  }
  if (!rows.length) { noData(body, 'No tasks in this report.'); return; }
  const maxSp = Math.max(1, ...rows.map((r) => (r.b && isNum(r.b.speedup) ? r.b.speedup : 0)));
  const multi = D.runs.length > 1;
  const trs = rows.map((r) => {
    const b = r.b;
    const lead = r.first ? h('td', { rowspan: String(r.span) }, h('b', { text: r.task })) : null;
    const runCell = multi ? h('td', null, h('span', { class: 'sw', style: 'background:' + r.run.color }), r.run.label) : null;
    if (!b) return h('tr', { class: r.first ? 'grp' : null }, lead, runCell, h('td', { class: 'mut', colspan: '5', text: 'no passing kernel' }));
    found++;
    const s = b.search != null ? r.run.searchById.get(b.search) : null;
    const frac = Math.log1p(Math.max(0, b.speedup || 0)) / Math.log1p(maxSp);
    const sp = h('td', null, h('div', { class: 'spcell' }, h('b', { text: fmtX(b.speedup) }),
      h('div', { class: 'track' }, h('div', { style: 'width:' + (100 * frac).toFixed(1) + '%;background:' + (b.speedup >= 1 ? '#4ade80' : '#f87171') })),
      h('span', null, r.top ? h('span', { class: 'badge', text: 'best' }) : null)));
    return h('tr', { class: r.first ? 'grp' : null }, lead, runCell, sp,
      h('td', { class: 'n', text: b.search != null ? '#' + b.search : DASH, title: s ? s.task : null }),
      h('td', { class: 'n', text: b.candidate ? '#' + b.candidate : DASH }),
      h('td', { class: 'n', text: fmtSec(b.t) }),
      h('td', null, kernelDetails(b)));
  });
  body.append(h('div', { style: 'overflow-x:auto' }, h('table', null,
    h('thead', null, h('tr', null, h('th', { text: 'Task' }), multi ? h('th', { text: 'Run' }) : null, h('th', { text: 'Best speedup' }),
      h('th', { class: 'n', text: 'Search' }), h('th', { class: 'n', text: 'Candidate' }), h('th', { class: 'n', text: 'Found at' }), h('th', { text: 'Kernel' }))),
    h('tbody', null, trs))));
  setItems(sec, found);
}
// The run's best kernel for a task: from run.best, else from the searches' results (without source).
function bestOf(run, task) {
  let b = null;
  for (const x of run.best) if (x.task === task && (!b || (x.speedup || 0) > (b.speedup || 0))) b = x;
  let s = null;
  for (const x of run.searches) if (x.task === task && isNum(x.bestSpeedup) && x.best && (!s || x.bestSpeedup > s.bestSpeedup)) s = x;
  if (!b && s) b = { task, search: s.id, candidate: s.best, speedup: s.bestSpeedup, t: null, source: '', plan: '' };
  if (!b) return null;
  if (b.t == null) {
    const ss = b.search != null ? run.searchById.get(b.search) : s;
    if (ss && ss.curve.length) b.t = ss.curve[ss.curve.length - 1][0];
  }
  return b;
}
function kernelDetails(b) {
  if (!b.source && !b.plan) return h('span', { class: 'mut small', text: 'source not in the report' });
  const d = h('details', null, h('summary', { text: 'plan & source' + (b.source ? ' (' + b.source.split('\n').length + ' lines)' : '') }));
  d.addEventListener('toggle', () => {  // filled on first open; textContent keeps the code inert
    if (!d.open || d.dataset.filled) return;
    d.dataset.filled = '1';
    const code = h('div', { class: 'code' });
    if (b.plan) code.append(h('h4', { text: 'launch plan' }), h('pre', { text: b.plan }));
    if (b.source) code.append(h('h4', { text: 'source' }), h('pre', { text: b.source }));
    d.append(code);
  });
  return d;
}

// ---------------------------------------------------------------- 5. main
function renderView(id, fn, D) {  // sets data-ms on the view's section: the time it took
  const t0 = performance.now();
  try { fn(D); } catch (e) {
    noteError(id + ': ' + (e && e.message ? e.message : e));
    const sec = document.getElementById(id), body = sec && sec.querySelector('.vb');
    if (body) body.append(h('div', { class: 'nodata failed', text: 'This view could not be drawn: ' + (e && e.message ? e.message : e) }));
  }
  const sec = document.getElementById(id);
  if (sec) sec.dataset.ms = (performance.now() - t0).toFixed(1);
}
function main() {
  let D;
  const t0 = performance.now();
  try { D = load(); } catch (e) { noteError('load: ' + e.message); D = { runs: [], tasks: [], tMax: 1, error: 'The report data could not be read: ' + e.message }; }
  document.body.dataset.loadMs = (performance.now() - t0).toFixed(1);
  renderView('header', renderHeader, D);
  renderView('view-summary', renderSummary, D);
  renderView('view-speedup', renderSpeedup, D);
  renderView('view-streams', renderStreams, D);
  renderView('view-gpus', renderGpus, D);
  renderView('view-verdicts', renderVerdicts, D);
  renderView('view-tokens', renderTokens, D);
  renderView('view-best', renderBest, D);
  const ms = performance.now() - T_START;
  document.getElementById('foot').textContent = (D.generatedBy || 'specgen-report') + DOT + 'rendered in ' + ms.toFixed(0) + ' ms';
  document.body.dataset.renderMs = String(ms);
  document.body.dataset.rendered = '1';
}
main();
</script>
</body>
</html>
)SPECGEN_PAGE";

#pragma GCC diagnostic pop

}  // namespace detail
SPECGEN_END_NAMESPACE
