// The timeline: one bar per request, in lanes by the worker (pid and thread) that ran it, on a time
// axis it shares with the ping track. Drawn only from timestamps in the events, never arrival times.

import { $, PALETTE, axisLabel, el, ms, roundSpan, sec, threadLabel, ticks } from "./format.js";

const ERROR_FILL = "url(#hatch-error)";

// The time axis shared by the timeline and the ping track.
export function frameFor(race, width, fixedSpan = null) {
  const narrow = width < 560;
  const left = narrow ? 78 : 150;
  const right = narrow ? 10 : 24;
  let origin = null;
  let latest = null;
  if (race) {
    const sent = race.responses.map((r) => r.sent);
    // (race.pings holds batches of probes: the first one sent at `from`, the last answered at `to`.)
    origin = sent.length ? Math.min(...sent) : race.pings.length ? race.pings[0].from : null;
    const ends = race.responses.map((r) => r.received).concat(race.pings.map((batch) => batch.to));
    latest = ends.length ? Math.max(...ends) : origin;
  }
  let span = origin === null ? 1 : latest - origin;
  if (race && race.solo) span = Math.max(span, race.solo);
  if (race && race.summary) span = Math.max(span, race.summary.ideal_s, race.summary.elapsed_s);
  span = fixedSpan || roundSpan(Math.max(span * 1.04, 0.01));
  const plot = width - left - right;
  return {
    width, left, right, narrow, origin, span, plot,
    x: (t) => left + Math.max(0, Math.min(1, (t - origin) / span)) * plot,
    dx: (seconds) => (seconds / span) * plot,
  };
}

function laneKey(response) {
  const worker = response.body && response.body.worker;
  // A cluster's workers may share pids across machines: their address tells them apart.
  return worker ? `${worker.pid}|${worker.thread}|${worker.address || ""}` : "failed";
}

function lanesOf(race) {
  const lanes = new Map();
  for (const response of race.responses) {
    const key = laneKey(response);
    if (!race.laneColours.has(key) && key !== "failed") race.laneColours.set(key, race.laneColours.size);
    if (!lanes.has(key)) lanes.set(key, { key, rows: [] });
    lanes.get(key).rows.push(response);
  }
  const start = (r) => (r.body && r.body.timing ? r.body.timing.started : r.sent);
  const ordered = [...lanes.values()];
  for (const lane of ordered) lane.rows.sort((a, b) => start(a) - start(b));
  ordered.sort((a, b) => {
    if (a.key === "failed" || b.key === "failed") return a.key === "failed" ? 1 : -1;
    const [pa, ta] = a.key.split("|");
    const [pb, tb] = b.key.split("|");
    return Number(pa) - Number(pb) || ta.localeCompare(tb, "en", { numeric: true });
  });
  return ordered;
}

// [name, second line]: the event loop, a worker process, or a thread of the server's pool.
function laneLabel(lane, narrow) {
  if (lane.key === "failed") return ["no answer", ""];
  const [pid, thread] = lane.key.split("|");
  const first = lane.rows[0].body;
  if (thread === "MainThread" && first.server && String(first.server.pid) === pid) {
    // A server process's own loop: in a forked server, its count is that child's share of the race.
    return ["event loop", `pid ${pid}, ${lane.rows.length} req.`];
  }
  if (first.worker && first.worker.address) {
    // A cluster worker: named by its address, which says which machine too.
    const where = first.worker.address.replace(/^[a-z]+:\/\//, "");
    return [narrow ? where.replace(/^.*:/, ":") : `worker ${where}`, `pid ${pid}`];
  }
  if (thread === "MainThread") return [narrow ? `pid ${pid}` : `worker pid ${pid}`, ""];
  return [threadLabel(thread), `pid ${pid}`];
}

// The lane's tooltip: everything the envelopes say about where its requests ran.
function laneTitle(lane) {
  if (lane.key === "failed") return "requests that got no answer";
  const [pid, thread, address] = lane.key.split("|");
  return `pid ${pid}, thread ${thread}${address ? `, ${address}` : ""}`;
}

export function drawTimeline(svg, race, f) {
  svg.replaceChildren();
  const top = 36;
  const soloRow = 22;
  const axisH = 26;
  if (!race) {
    const h = 120;
    svg.setAttribute("viewBox", `0 0 ${f.width} ${h}`);
    svg.setAttribute("height", h);
    el("text", { x: f.width / 2, y: h / 2, class: "placeholder", "text-anchor": "middle" }, svg,
      "Each request will appear here as a bar, in lanes by the worker that ran it.");
    return;
  }
  const lanes = lanesOf(race);
  const rows = Math.max(race.request.concurrency, race.responses.length);
  const rowH = Math.max(7, Math.min(24, Math.floor((f.narrow ? 300 : 380) / rows)));
  const laneGap = 6;
  const minLane = 16;
  let y = top + soloRow + 8;
  const layout = lanes.map((lane) => {
    const height = Math.max(minLane, lane.rows.length * rowH);
    const entry = { lane, y, height };
    y += height + laneGap;
    return entry;
  });
  const expectedRows = Math.max(0, race.request.concurrency - race.responses.length);
  const plotBottom = Math.max(y + expectedRows * rowH, top + soloRow + 8 + minLane);
  const height = plotBottom + axisH;
  svg.setAttribute("viewBox", `0 0 ${f.width} ${height}`);
  svg.setAttribute("height", height);

  // Lane bands, then grid and axis, then bars on top.
  const bands = el("g", { class: "bands" }, svg);
  const grid = el("g", { class: "grid" }, svg);
  for (const t of ticks(f.span, f.narrow ? 4 : 8)) {
    const x = f.left + f.dx(t);
    el("line", { x1: x, x2: x, y1: top - 6, y2: plotBottom }, grid);
    el("text", { x, y: plotBottom + 16, "text-anchor": "middle" }, grid, axisLabel(t));
  }
  el("text", { x: f.left - 8, y: plotBottom + 16, "text-anchor": "end", class: "axis-name" }, grid,
    f.narrow ? "" : "since release");

  // Reference: one request on an idle server.
  const ref = el("g", { class: "solo" }, svg);
  el("text", { x: f.left - 8, y: top + soloRow / 2 + 4, "text-anchor": "end", class: "lane-label" }, ref,
    f.narrow ? "alone" : "one request alone");
  if (race.solo) {
    const w = Math.max(2, f.dx(race.solo));
    el("rect", { x: f.left, y: top + 3, width: w, height: soloRow - 6, rx: 2 }, ref);
    const text = `t = ${sec(race.solo)}`;
    const outside = f.left + w + 8 + text.length * 7 <= f.width;
    el("text", { x: outside ? f.left + w + 6 : f.left + w - 6, y: top + soloRow / 2 + 4,
      "text-anchor": outside ? "start" : "end", class: outside ? "solo-label" : "solo-label inside" }, ref, text);
  } else if (race.phase === "solo") {
    el("text", { x: f.left + 6, y: top + soloRow / 2 + 4, class: "solo-label" }, ref, "timing it…");
  }

  // Lanes.
  const clients = el("g", { class: "clients" }, svg);
  const bars = el("g", { class: "bars" }, svg);
  layout.forEach(({ lane, y: laneY, height: laneH }, i) => {
    el("rect", { x: 0, y: laneY - laneGap / 2, width: f.width, height: laneH + laneGap,
      class: i % 2 ? "lane-band odd" : "lane-band" }, bands);
    const colour = lane.key === "failed" ? "#000" : PALETTE[race.laneColours.get(lane.key) % PALETTE.length];
    const [name, sub] = laneLabel(lane, f.narrow);
    const label = el("g", { class: "lane-label" }, svg);
    el("title", {}, label, laneTitle(lane));
    el("rect", { x: 4, y: laneY + 2, width: 6, height: Math.min(12, laneH - 4), fill: colour, class: "lane-swatch" }, label);
    el("text", { x: 14, y: laneY + 12 }, label, name);
    if (sub && laneH >= 28) el("text", { x: 14, y: laneY + 25, class: "lane-sub" }, label, sub);
    const rowHere = Math.min(rowH, laneH / lane.rows.length);
    lane.rows.forEach((response, j) => {
      const rowY = laneY + j * rowHere;
      drawBar(bars, clients, response, f, rowY, rowHere, colour, race);
    });
  });

  // Ideal and actual finish, once known: one label row each, so they never collide.
  if (race.summary) {
    const s = race.summary;
    const markers = el("g", { class: "markers" }, svg);
    const mark = (seconds, label, className, labelY) => {
      const x = f.x(f.origin + seconds);
      el("line", { x1: x, x2: x, y1: labelY + 3, y2: plotBottom, class: className }, markers);
      const fits = x + 4 + label.length * 6.6 <= f.width;
      el("text", { x: fits ? x + 4 : x - 4, y: labelY, "text-anchor": fits ? "start" : "end",
        class: `${className}-label` }, markers, label);
    };
    mark(s.elapsed_s, `all answered ${sec(s.elapsed_s)}`, "finish", 12);
    mark(s.ideal_s, `ideal ${sec(s.ideal_s)}`, "ideal", 26);
  }
}

const known = (v) => v !== null && v !== undefined;

// A part of a run's time (cpu_ms, core_wait_ms...) as a share of its run time, or null where not told.
function shareOf(timing, part) {
  if (!known(timing[part]) || !(timing.run_ms > 0)) return null;
  return Math.max(0, Math.min(1, timing[part] / timing.run_ms));
}

// The part of a run's blocked time that was not the GIL's (ms): all of it where the GIL's part is not
// told (a workload's own wait), the rest where it is (a worker alone with its GIL: all of it). Null if none.
function otherBlocked(timing) {
  if (!known(timing.blocked_ms)) return null;
  const rest = timing.blocked_ms - (timing.gil_wait_ms ?? 0);
  return rest >= 0.5 ? rest : null;
}

// "computing 99 ms, waiting 15 ms for a core and 110 ms for the GIL": the run's own split, in words.
function splitWords(timing) {
  if (!known(timing.cpu_ms)) return "";
  const waits = [];
  if (known(timing.core_wait_ms)) waits.push(`${ms(timing.core_wait_ms)} for a core`);
  if (timing.gil_wait_ms > 0) waits.push(`${ms(timing.gil_wait_ms)} for the GIL`);
  const other = otherBlocked(timing);
  const blocked = other === null ? "" : `, blocked ${ms(other)} ${known(timing.gil_wait_ms)
    ? "by something other than the GIL (its GIL is its own)" : "(its own wait, or the GIL: not told apart)"}`;
  return `, computing ${ms(timing.cpu_ms)} of it${waits.length ? `, waiting ${waits.join(" and ")}` : ""}${blocked}`;
}

function drawBar(bars, clients, response, f, y, h, colour, race) {
  const body = response.body || {};
  const timing = body.timing;
  const worker = body.worker || {};
  const mid = y + h / 2;
  const pad = h >= 10 ? 1.5 : 0.75;
  el("line", { x1: f.x(response.sent), x2: f.x(response.received), y1: mid, y2: mid, class: "client-wait" }, clients);
  const bar = el("g", {
    class: "request-bar",
    "data-index": response.index,
    "data-pid": worker.pid ?? "",
    "data-thread": worker.thread ?? "",
    "data-status": response.status,
    "data-queued-ms": timing ? timing.queued_ms : "",
    "data-run-ms": timing ? timing.run_ms : "",
    "data-cpu-ms": timing && known(timing.cpu_ms) ? timing.cpu_ms : "",
    "data-core-wait-ms": timing && known(timing.core_wait_ms) ? timing.core_wait_ms : "",
    "data-blocked-ms": timing && known(timing.blocked_ms) ? timing.blocked_ms : "",
    "data-gil-wait-ms": timing && known(timing.gil_wait_ms) ? timing.gil_wait_ms : "",
  }, bars);
  const title = el("title", {}, bar);
  if (timing && response.status === 200) {
    const xr = f.x(timing.received);
    const xs = f.x(timing.started);
    const xf = f.x(timing.finished);
    if (xs - xr >= 0.5) {
      el("rect", { x: xr, y: y + pad, width: xs - xr, height: h - 2 * pad, fill: `url(#hatch-${PALETTE.indexOf(colour)})`,
        stroke: colour, class: "queue" }, bar);
    }
    const width = Math.max(1.5, xf - xs);
    const computed = shareOf(timing, "cpu_ms");
    if (computed === null) {
      el("rect", { x: xs, y: y + pad, width, height: h - 2 * pad, fill: colour, class: "run" }, bar);
    } else {
      // Started, then computing for cpu_ms of it, waiting core_wait_ms for a core (grey) and blocked by
      // something other than the GIL (light grey: a workload's own wait, a worker alone with its GIL);
      // the pale rest is time it waited for the GIL. Where in the run the parts fell is not known,
      // their sums are: drawn in that order.
      el("rect", { x: xs, y: y + pad, width, height: h - 2 * pad, fill: colour, class: "run started" }, bar);
      const cpuWidth = Math.max(1, width * computed);
      el("rect", { x: xs, y: y + pad, width: cpuWidth, height: h - 2 * pad, fill: colour, class: "run computing" }, bar);
      let drawn = cpuWidth;
      const part = (share, className) => {
        if (share === null || width * share < 0.5) return;
        const w = Math.min(width * share, width - drawn);
        el("rect", { x: xs + drawn, y: y + pad, width: w, height: h - 2 * pad, class: `run ${className}` }, bar);
        drawn += w;
      };
      part(shareOf(timing, "core_wait_ms"), "core-wait");
      const other = otherBlocked(timing);
      part(other === null ? null : Math.min(1, other / timing.run_ms), "blocked");
    }
    title.textContent = `request ${response.index}: waited ${ms(timing.queued_ms)} for a worker, ran `
      + `${ms(timing.run_ms)}${splitWords(timing)} `
      + `on ${worker.thread} of pid ${worker.pid}; the client waited ${ms((response.received - response.sent) * 1000)}`;
  } else {
    const xa = f.x(response.sent);
    const xb = f.x(response.received);
    el("rect", { x: xa, y: y + pad, width: Math.max(2, xb - xa), height: h - 2 * pad, fill: ERROR_FILL, class: "failed" }, bar);
    if (h >= 10) el("text", { x: xb + 4, y: y + h / 2 + 4, class: "failed-label" }, bar, `✕ ${response.status || "no answer"}`);
    const message = body.error ? body.error.message : "";
    title.textContent = `request ${response.index} failed with status ${response.status}${message ? `: ${message}` : ""}`;
  }
  return race;
}

export function drawDefs() {
  const defs = $("#defs defs");
  PALETTE.forEach((colour, i) => {
    const pattern = el("pattern", { id: `hatch-${i}`, width: 6, height: 6, patternUnits: "userSpaceOnUse",
      patternTransform: "rotate(45)" }, defs);
    el("rect", { width: 6, height: 6, fill: colour, "fill-opacity": 0.14 }, pattern);
    el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: colour, "stroke-width": 2.2 }, pattern);
  });
  const error = el("pattern", { id: "hatch-error", width: 6, height: 6, patternUnits: "userSpaceOnUse" }, defs);
  el("rect", { width: 6, height: 6, fill: "#fff" }, error);
  el("path", { d: "M0 0L6 6M6 0L0 6", stroke: "#000", "stroke-width": 1.2 }, error);
}
