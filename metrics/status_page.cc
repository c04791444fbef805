// The chief's status page (see StatusBoard): one static document, no build step, nothing
// fetched from outside. It polls status.json once a second.
#include <string>

#include "metrics/status_board.h"

namespace asyncps::metrics {

const char* StatusPageHtml() {
  static constexpr char kPage[] = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>asyncps: training status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fafafa; }
  h1 { font-size: 20px; margin: 0 0 .5em; }
  h2 { font-size: 15px; margin: 1.2em 0 .4em; }
  .tiles { display: flex; gap: 1em; flex-wrap: wrap; }
  .tile { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: .5em 1em; min-width: 8em; }
  .tile b { display: block; font-size: 20px; }
  table { border-collapse: collapse; background: #fff; }
  td, th { border: 1px solid #ddd; padding: 3px 10px; text-align: left; }
  .state-up { color: #137333; font-weight: bold; }
  .state-down { color: #c5221f; font-weight: bold; }
  .state-recovering, .state-starting, .state-joining, .state-draining { color: #b06000; font-weight: bold; }
  .state-left { color: #777; }
  .plots { display: flex; gap: 1.5em; flex-wrap: wrap; }
  svg.plot { background: #fff; border: 1px solid #ddd; }
  #events li { font-family: monospace; }
  #error { color: #c5221f; }
</style>
</head>
<body>
<h1>asyncps training job</h1>
<div id="error"></div>
<div class="tiles">
  <div class="tile">closures/s<b id="rate">-</b></div>
  <div class="tile">completed<b id="completed">-</b></div>
  <div class="tile">queue depth<b id="queue">-</b></div>
  <div class="tile">in flight<b id="inflight">-</b></div>
  <div class="tile">workers up<b id="workersup">-</b></div>
  <div class="tile">uptime<b id="uptime">-</b></div>
</div>
<h2>Members</h2>
<table id="members"><thead><tr><th>role</th><th>task</th><th>address</th><th>state</th><th>incarnation</th><th>restarts</th></tr></thead>
<tbody></tbody></table>
<div id="replication" hidden>
<h2>Shard groups</h2>
<table id="groups"><thead><tr><th>group</th><th>primary</th><th>backups</th><th>rebuilding</th><th>generation</th></tr></thead>
<tbody></tbody></table>
<p id="replication-counters"></p>
</div>
<div id="data-service" hidden>
<h2>tf.data service</h2>
<p id="ds-summary"></p>
<table id="ds-workers"><thead><tr><th>data worker</th><th>address</th><th>state</th><th>last heartbeat</th><th>jobs</th><th>split streams</th><th>elements</th></tr></thead>
<tbody></tbody></table>
<table id="ds-jobs"><thead><tr><th>job</th><th>name</th><th>dataset</th><th>mode</th></tr></thead>
<tbody></tbody></table>
</div>
<h2>Scalars</h2>
<div class="plots" id="plots"></div>
<h2>Recent events</h2>
<ul id="events"></ul>
<script>
"use strict";
const SVG = "http://www.w3.org/2000/svg";

function text(id, v) { document.getElementById(id).textContent = v; }

function el(tag, attrs, parent) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

function fmt(v) {
  if (v === undefined || v === null) return "-";
  return Math.abs(v) >= 100 || Number.isInteger(v) ? String(Math.round(v)) : v.toPrecision(4);
}

function plot(name, points) {
  const W = 420, H = 220, L = 50, R = 10, T = 24, B = 30;
  const svg = el("svg:svg", {id: "plot-" + name, class: "plot", width: W, height: H, "data-points": points.length});
  el("svg:text", {x: L, y: 16, "font-size": 13, "font-weight": "bold"}, svg).textContent =
      name + " (last " + fmt(points.length ? points[points.length - 1][1] : null) + ")";
  if (points.length === 0) return svg;
  let x0 = points[0][0], x1 = points[points.length - 1][0];
  let y0 = Infinity, y1 = -Infinity;
  for (const p of points) { y0 = Math.min(y0, p[1]); y1 = Math.max(y1, p[1]); }
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const sx = s => L + (s - x0) / (x1 - x0) * (W - L - R);
  const sy = v => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  el("svg:line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999"}, svg);
  el("svg:line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#999"}, svg);
  el("svg:text", {x: L - 4, y: T + 4, "font-size": 11, "text-anchor": "end"}, svg).textContent = fmt(y1);
  el("svg:text", {x: L - 4, y: H - B, "font-size": 11, "text-anchor": "end"}, svg).textContent = fmt(y0);
  el("svg:text", {x: L, y: H - 8, "font-size": 11}, svg).textContent = "step " + x0;
  el("svg:text", {x: W - R, y: H - 8, "font-size": 11, "text-anchor": "end"}, svg).textContent = "step " + x1;
  el("svg:polyline", {fill: "none", stroke: "#1a73e8", "stroke-width": 1.5,
                      points: points.map(p => sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ")}, svg);
  for (const p of points.slice(-200)) {
    el("svg:circle", {class: "point", cx: sx(p[0]).toFixed(1), cy: sy(p[1]).toFixed(1), r: 2.2, fill: "#1a73e8"}, svg);
  }
  return svg;
}

function render(s) {
  const v = s.values || {};
  // The chief computes the rate over its last seconds (metrics/status_board.h), so the
  // first poll of a page shows it too.
  text("rate", fmt(v.closures_per_second));
  text("completed", fmt(v.closures_completed));
  text("queue", fmt(v.queue_depth));
  text("inflight", fmt(v.closures_in_flight));
  text("workersup", v.workers_up === undefined ? "-" : fmt(v.workers_up) + " / " + fmt(v.workers));
  text("uptime", Math.round(s.now - s.started) + " s");

  const tbody = document.querySelector("#members tbody");
  tbody.replaceChildren();
  for (const m of s.members) {
    const tr = el("tr", {class: "member", "data-role": m.role, "data-state": m.state}, tbody);
    el("td", {}, tr).textContent = m.role;
    el("td", {}, tr).textContent = m.index;
    el("td", {}, tr).textContent = m.address;
    el("td", {class: "state-" + m.state}, tr).textContent = m.state;
    el("td", {}, tr).textContent = m.incarnation || "-";
    el("td", {class: "restarts"}, tr).textContent = fmt(m.restarts || 0);
  }

  if (s.shard_groups) {
    document.getElementById("replication").hidden = false;
    const gbody = document.querySelector("#groups tbody");
    gbody.replaceChildren();
    for (const g of s.shard_groups) {
      const tr = el("tr", {class: "group", "data-primary": g.primary}, gbody);
      el("td", {}, tr).textContent = g.group;
      el("td", {}, tr).textContent = g.primary < 0 ? "none" : "ps " + g.primary;
      el("td", {}, tr).textContent = g.backups.join(", ") || "-";
      el("td", {}, tr).textContent = g.rebuilding.join(", ") || "-";
      el("td", {}, tr).textContent = g.generation;
    }
    const r = s.replication || {};
    text("replication-counters", Object.keys(r).sort().map(k => k + " " + fmt(r[k])).join(" \u00b7 "));
  }

  if (s.data_service) {
    const d = s.data_service;
    document.getElementById("data-service").hidden = false;
    text("ds-summary", "dispatcher " + d.dispatcher + (d.in_chief ? " (in the chief)" : "") + ": " + d.state +
         " \u00b7 " + fmt(d.datasets) + " datasets \u00b7 " + fmt(d.num_jobs) + " jobs \u00b7 " +
         (d.journal ? "journal " + d.journal : "no journal") + (d.generation ? " \u00b7 generation " + d.generation : ""));
    const wbody = document.querySelector("#ds-workers tbody");
    wbody.replaceChildren();
    for (const w of d.data_workers) {
      const tr = el("tr", {class: "data-worker", "data-state": w.state}, wbody);
      el("td", {}, tr).textContent = w.index;
      el("td", {}, tr).textContent = w.address;
      el("td", {class: "state-" + w.state}, tr).textContent = w.state;
      el("td", {}, tr).textContent = w.seconds_since_heartbeat < 0 ? "never" : w.seconds_since_heartbeat.toFixed(1) + " s ago";
      el("td", {}, tr).textContent = fmt(w.jobs);
      el("td", {}, tr).textContent = fmt(w.split_streams);
      el("td", {}, tr).textContent = fmt(w.elements);
    }
    const jbody = document.querySelector("#ds-jobs tbody");
    jbody.replaceChildren();
    for (const j of d.jobs.slice().reverse()) {
      const tr = el("tr", {class: "ds-job"}, jbody);
      el("td", {}, tr).textContent = j.id;
      el("td", {}, tr).textContent = j.name || "(anonymous)";
      el("td", {}, tr).textContent = j.dataset;
      el("td", {}, tr).textContent = j.mode;
    }
  }

  const plots = document.getElementById("plots");
  plots.replaceChildren();
  for (const name of Object.keys(s.series).sort()) plots.appendChild(plot(name, s.series[name]));

  const events = document.getElementById("events");
  events.replaceChildren();
  for (const e of s.events.slice().reverse()) {
    el("li", {class: "event", "data-kind": e.kind}, events).textContent =
        new Date(e.time * 1000).toISOString().slice(11, 19) + "  " + e.kind + "  " + e.text;
  }
}

async function poll() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    render(await r.json());
    text("error", "");
    document.body.setAttribute("data-polls", 1 + Number(document.body.getAttribute("data-polls") || 0));
  } catch (e) {
    text("error", "cannot reach the chief: " + e);
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
)html";
  return kPage;
}

}  // namespace asyncps::metrics
