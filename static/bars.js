// One request's bar on the timeline: hatched while it waited in the server for a worker, then its run
// from start to finish, in layers. The envelope gives the sums of a run's parts, not their moments, so
// every layer spans the whole run, as thick as its share (bottom up): computing, waiting for a core,
// its own wait (a sleep, a query, the upstream), held up by something else; the pale rest is time it
// waited for the GIL. Nothing is drawn "after" the run: a wait spread over the run is drawn over all of it.

import { PALETTE, el, known, ms } from "./format.js";

const ERROR_FILL = "url(#hatch-error)";

// The run's own wait (ms): timing.io_wait_ms where the envelope tells it; where it does not, all a
// workload that only waits (`waits`: a sleep, the upstream) did not compute, wait for a core or the GIL.
function ownWait(timing, waits) {
  if (known(timing.io_wait_ms)) return timing.io_wait_ms;
  if (!waits) return null;
  return Math.max(0, timing.run_ms - (timing.cpu_ms ?? 0) - (timing.core_wait_ms ?? 0) - (timing.gil_wait_ms ?? 0));
}

// A run's time in parts (ms, null where not told): computing, waiting for a core, its own wait, the GIL,
// and blocked by something else. Blocked time leaves out the own wait where the envelope tells it apart.
export function split(timing, waits) {
  const own = ownWait(timing, waits);
  const gil = timing.gil_wait_ms ?? null;
  let other = null;
  if (known(timing.blocked_ms)) {
    const carved = known(timing.io_wait_ms) ? 0 : own ?? 0;
    other = Math.max(0, timing.blocked_ms - (gil ?? 0) - carved);
  }
  return { cpu: timing.cpu_ms ?? null, core: timing.core_wait_ms ?? null, own, gil, other };
}

// "computing 99 ms of it, waiting 15 ms for a core and 110 ms for the GIL": the run's own split, in words.
function splitWords(parts, gilTold) {
  const told = [];
  if (known(parts.cpu)) told.push(`computing ${ms(parts.cpu)} of it`);
  const waits = [];
  if (known(parts.core)) waits.push(`${ms(parts.core)} for a core`);
  if (parts.gil > 0) waits.push(`${ms(parts.gil)} for the GIL`);
  if (waits.length) told.push(`waiting ${waits.join(" and ")}`);
  if (parts.own >= 0.5) told.push(`waiting ${ms(parts.own)} on purpose (its own wait)`);
  if (parts.other >= 0.5) {
    told.push(`blocked ${ms(parts.other)} ${gilTold ? "by something other than the GIL (its GIL is its own)"
      : "(by the GIL or something else: not told apart)"}`);
  }
  return told.length ? `, ${told.join(", ")}` : "";
}

// The run's layers, bottom up, over a pale background (the GIL's share, and whatever is not told).
function drawRun(bar, timing, parts, box, colour, index) {
  const { x, y, width, height } = box;
  if (!known(parts.cpu) && !known(parts.own)) {
    // Nothing told of how it spent its time: drawn as running, one colour for its worker.
    el("rect", { x, y, width, height, fill: colour, class: "run" }, bar);
    return;
  }
  el("rect", { x, y, width, height, fill: colour, class: "run started" }, bar);
  let bottom = y + height;
  const layer = (value, className, fill) => {
    const thick = timing.run_ms > 0 && known(value) ? Math.min(bottom - y, height * (value / timing.run_ms)) : 0;
    if (thick < 0.5) return;
    bottom -= thick;
    el("rect", { x, y: bottom, width, height: thick, class: `run ${className}`, ...(fill ? { fill } : {}) }, bar);
  };
  layer(parts.cpu, "computing", colour);
  layer(parts.core, "core-wait");
  layer(parts.own, "own-wait", `url(#dots-${index})`);
  layer(parts.other, "blocked");
}

const data = (value) => (known(value) ? value : "");

export function drawBar(bars, clients, response, f, y, h, colour, waits) {
  const body = response.body || {};
  const timing = body.timing;
  const worker = body.worker || {};
  const mid = y + h / 2;
  const pad = h >= 10 ? 1.5 : 0.75;
  el("line", { x1: f.x(response.sent), x2: f.x(response.received), y1: mid, y2: mid, class: "client-wait" }, clients);
  const parts = timing ? split(timing, waits) : {};
  const bar = el("g", {
    class: "request-bar",
    "data-index": response.index,
    "data-pid": worker.pid ?? "",
    "data-thread": worker.thread ?? "",
    "data-status": response.status,
    "data-queued-ms": timing ? timing.queued_ms : "",
    "data-run-ms": timing ? timing.run_ms : "",
    "data-cpu-ms": data(parts.cpu),
    "data-core-wait-ms": data(parts.core),
    "data-blocked-ms": timing ? data(timing.blocked_ms) : "",
    "data-gil-wait-ms": data(parts.gil),
    "data-own-wait-ms": data(parts.own),
  }, bars);
  const title = el("title", {}, bar);
  if (timing && response.status === 200) {
    const index = Math.max(0, PALETTE.indexOf(colour));
    const xr = f.x(timing.received);
    const xs = f.x(timing.started);
    if (xs - xr >= 0.5) {
      el("rect", { x: xr, y: y + pad, width: xs - xr, height: h - 2 * pad, fill: `url(#hatch-${index})`,
        stroke: colour, class: "queue" }, bar);
    }
    const box = { x: xs, y: y + pad, width: Math.max(1.5, f.x(timing.finished) - xs), height: h - 2 * pad };
    drawRun(bar, timing, parts, box, colour, index);
    title.textContent = `request ${response.index}: waited ${ms(timing.queued_ms)} for a worker, ran `
      + `${ms(timing.run_ms)}${splitWords(parts, known(timing.gil_wait_ms))} `
      + `on ${worker.thread} of pid ${worker.pid}; the client waited ${ms((response.received - response.sent) * 1000)}`;
  } else {
    const xa = f.x(response.sent);
    const xb = f.x(response.received);
    el("rect", { x: xa, y: y + pad, width: Math.max(2, xb - xa), height: h - 2 * pad, fill: ERROR_FILL, class: "failed" }, bar);
    if (h >= 10) el("text", { x: xb + 4, y: y + h / 2 + 4, class: "failed-label" }, bar, `✕ ${response.status || "no answer"}`);
    const message = body.error ? body.error.message : "";
    title.textContent = `request ${response.index} failed with status ${response.status}${message ? `: ${message}` : ""}`;
  }
}

// The patterns the bars and the legend fill with: per worker colour, hatched (waiting in the server for
// its turn) and dotted (its own wait); crossed for a request that failed.
export function drawDefs(defs) {
  PALETTE.forEach((colour, i) => {
    const hatch = el("pattern", { id: `hatch-${i}`, width: 6, height: 6, patternUnits: "userSpaceOnUse",
      patternTransform: "rotate(45)" }, defs);
    el("rect", { width: 6, height: 6, fill: colour, "fill-opacity": 0.14 }, hatch);
    el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: colour, "stroke-width": 2.2 }, hatch);
    const dots = el("pattern", { id: `dots-${i}`, width: 5, height: 5, patternUnits: "userSpaceOnUse" }, defs);
    el("rect", { width: 5, height: 5, fill: "#fff" }, dots);
    el("circle", { cx: 2.5, cy: 2.5, r: 1.3, fill: colour }, dots);
  });
  const error = el("pattern", { id: "hatch-error", width: 6, height: 6, patternUnits: "userSpaceOnUse" }, defs);
  el("rect", { width: 6, height: 6, fill: "#fff" }, error);
  el("path", { d: "M0 0L6 6M6 0L0 6", stroke: "#000", "stroke-width": 1.2 }, error);
}
