// The timeline: one bar per request, in lanes by the worker (pid and thread) that ran it, on a time
// axis it shares with the ping track. Drawn only from timestamps in the events, never arrival times.

import { drawBar } from "./bars.js";
import { PALETTE, axisLabel, el, roundSpan, sec, threadLabel, ticks } from "./format.js";
import { headline } from "./ideal.js";
import { longestWarmup, soloSoFar } from "./race.js";

const TOP = 36;
const SOLO_ROW = 22;
const AXIS_H = 26;
const LANE_GAP = 6;
const MIN_LANE = 16;

// The time axis shared by the timeline and the ping track.
export function frameFor(race, width, fixedSpan = null) {
  const narrow = width < 560;
  const left = narrow ? 86 : 150;
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
  if (race) span = Math.max(span, soloSoFar(race) || longestWarmup(race)); // t once timed, else the warm-ups
  if (race && race.summary) span = Math.max(span, headline(race.summary).ideal, race.summary.elapsed_s);
  span = fixedSpan || roundSpan(Math.max(span * 1.04, 0.01));
  const plot = width - left - right;
  return {
    width, left, right, narrow, origin, latest, span, plot,
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

// [name, second line]: the event loop, a cluster's worker, a worker process, or a thread of the server's pool.
function laneLabel(lane, narrow) {
  if (lane.key === "failed") return ["no answer", ""];
  const [pid, thread] = lane.key.split("|");
  const first = lane.rows[0].body;
  if (thread === "MainThread" && first.server && String(first.server.pid) === pid) {
    // A server process's own loop: in a forked server, its count is that child's share of the race.
    return ["event loop", `pid ${pid}, ${lane.rows.length} req.`];
  }
  if (first.worker && first.worker.address) {
    // A cluster worker: named by its address, which says which machine too; "worker" goes below.
    const where = first.worker.address.replace(/^[a-z]+:\/\//, "");
    return [narrow ? where.replace(/^.*:/, ":") : where, `worker pid ${pid}`];
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

// Shorten a label that would run into the bars, keeping both ends ("10.0.0.12:3…:45678"): its full
// text is in the lane's tooltip. Measured where it is drawn, so whatever the font.
function fitText(node, room) {
  const full = node.textContent;
  if (!node.isConnected || node.getComputedTextLength() <= room) return;
  for (let keep = full.length - 1; keep > 2; keep--) {
    const head = Math.ceil(keep / 2);
    node.textContent = `${full.slice(0, head)}…${full.slice(full.length - (keep - head))}`;
    if (node.getComputedTextLength() <= room) return;
  }
}

// One bar of the "alone" row, `seconds` long, and its label after it, or inside its end where it would not fit
// (white on the dark bar of t, dark on a warm-up's light one).
function soloBar(ref, f, seconds, text, className) {
  const w = Math.max(2, f.dx(seconds));
  el("rect", { x: f.left, y: TOP + 3, width: w, height: SOLO_ROW - 6, rx: 2, class: className,
    "data-seconds": seconds.toFixed(4) }, ref);
  const outside = f.left + w + 8 + text.length * 7 <= f.width;
  const inside = className === "warmup" ? "solo-label" : "solo-label inside";
  el("text", { x: outside ? f.left + w + 6 : f.left + w - 6, y: TOP + SOLO_ROW / 2 + 4,
    "text-anchor": outside ? "start" : "end", class: outside ? "solo-label" : inside }, ref, text);
}

// One request alone from the race's own records, once it is done: a run as long as the runs' median CPU time
// in the race where they compute (the CPU ideal's t), or its shortest run where that is shorter; null where that
// is not shorter than t. t was timed alone before the race, sometimes on a slower moment of the host than the race's own runs.
export function aloneInRace(race) {
  const s = race && race.summary;
  if (!s || !race.solo) return null;
  const runs = race.responses.filter((r) => r.status === 200 && r.body && r.body.timing)
    .map((r) => r.body.timing.run_ms / 1000);
  if (!runs.length) return null;
  const cpu = headline(s).basis === "cpu" ? s.cpu_ideal_s / Math.max(1, Math.round(s.ideal_s / s.solo_s)) : Infinity;
  const own = Math.min(cpu, ...runs);
  return own > 0 && own < race.solo ? own : null;
}

// Reference: one request on an idle server, as its solo runs end (t is their median); once the race is done,
// never longer than its own runs (aloneInRace).
function drawSolo(svg, race, f) {
  const ref = el("g", { class: "solo" }, svg);
  el("text", { x: f.left - 8, y: TOP + SOLO_ROW / 2 + 4, "text-anchor": "end", class: "lane-label" }, ref,
    f.narrow ? "alone" : "one request alone");
  const t = soloSoFar(race);
  const own = aloneInRace(race);
  if (own) {
    const basis = headline(race.summary).basis === "cpu" ? "its CPU time in the race" : "the race's shortest run";
    soloBar(ref, f, own, f.narrow ? `${sec(own)} (t ${sec(t)})` : `${sec(own)}: ${basis} (timed alone before: ${
      sec(t)})`, "");
  } else if (t) {
    const runs = race.soloRuns;
    const more = !race.solo && runs.length ? ` (run ${runs.length} of ${runs[runs.length - 1].of})` : "";
    soloBar(ref, f, t, `t = ${sec(t)}${more}`, "");
  } else if (race.warmups.length) {
    // Before t: the warm-up requests, as they end (lighter: loaded, not alone), so the server is seen at work;
    // the longest drawn, and how many.
    const n = race.warmups.length;
    const text = f.narrow ? `warm-up, ${n} done` : `warming up: ${n} answered, then timing it…`;
    soloBar(ref, f, longestWarmup(race), text, "warmup");
  } else if (race.phase === "solo") {
    el("text", { x: f.left + 6, y: TOP + SOLO_ROW / 2 + 4, class: "solo-label" }, ref, "warming up, then timing it…");
  }
}

function drawLanes(svg, race, f, layout, rowH) {
  const bands = el("g", { class: "bands" }, svg);
  svg.insertBefore(bands, svg.firstChild); // under the grid and the bars
  const clients = el("g", { class: "clients" }, svg);
  const bars = el("g", { class: "bars" }, svg);
  const room = f.left - 14 - 6;
  layout.forEach(({ lane, y, height }, i) => {
    el("rect", { x: 0, y: y - LANE_GAP / 2, width: f.width, height: height + LANE_GAP,
      class: i % 2 ? "lane-band odd" : "lane-band" }, bands);
    const colour = lane.key === "failed" ? "#000" : PALETTE[race.laneColours.get(lane.key) % PALETTE.length];
    const [name, sub] = laneLabel(lane, f.narrow);
    const label = el("g", { class: "lane-label" }, svg);
    el("title", {}, label, laneTitle(lane));
    el("rect", { x: 4, y: y + 2, width: 6, height: Math.min(12, height - 4), fill: colour, class: "lane-swatch" }, label);
    fitText(el("text", { x: 14, y: y + 12 }, label, name), room);
    if (sub && height >= 28) fitText(el("text", { x: 14, y: y + 25, class: "lane-sub" }, label, sub), room);
    const rowHere = Math.min(rowH, height / lane.rows.length);
    lane.rows.forEach((response, j) => {
      drawBar(bars, clients, response, f, y + j * rowHere, rowHere, colour, race.waits);
    });
  });
}

// The requests not answered yet: their clients waiting, up to the latest moment the events tell of (the
// probes' answers), so that a race whose answers all come late is seen running. Before the release, or
// before any news with a time in it (a blocked event loop passes none on), their rows say so.
function drawInFlight(svg, race, f, y, rows, rowH) {
  if (!rows || (race.phase !== "racing" && race.phase !== "solo")) return;
  const flight = el("g", { class: "in-flight" }, svg);
  const released = race.phase === "racing";
  el("text", { x: 14, y: y + 12, class: "lane-label" }, flight,
    f.narrow ? (released ? "waiting" : "next") : released ? "not answered yet" : "to be released");
  if (!released || f.origin === null || f.latest <= f.origin) {
    const n = race.request.concurrency;
    el("text", { x: f.left + 6, y: y + 12, class: "placeholder" }, flight, !released
      ? (f.narrow ? `then ${n} at once` : `then ${n} requests, released together once t is timed`)
      : (f.narrow ? "no news yet" : `${n} released together: no news from the server yet`));
    return;
  }
  for (let i = 0; i < rows; i++) {
    const mid = y + i * rowH + rowH / 2;
    el("line", { x1: f.x(f.origin), x2: f.x(f.latest), y1: mid, y2: mid, class: "client-wait" }, flight);
  }
}

// Ideal and actual finish, once known: one label row each, so they never collide.
function drawMarkers(svg, race, f, plotBottom) {
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
  const ideal = headline(s).ideal;
  mark(ideal, `ideal ${sec(ideal)}`, "ideal", 26);
}

export function drawTimeline(svg, race, f) {
  svg.replaceChildren();
  svg.dataset.plotLeft = String(f.left);
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
  let y = TOP + SOLO_ROW + 8;
  const layout = lanes.map((lane) => {
    const height = Math.max(MIN_LANE, lane.rows.length * rowH);
    const entry = { lane, y, height };
    y += height + LANE_GAP;
    return entry;
  });
  const expectedRows = Math.max(0, race.request.concurrency - race.responses.length);
  const plotBottom = Math.max(y + expectedRows * rowH, TOP + SOLO_ROW + 8 + MIN_LANE);
  svg.setAttribute("viewBox", `0 0 ${f.width} ${plotBottom + AXIS_H}`);
  svg.setAttribute("height", plotBottom + AXIS_H);

  const grid = el("g", { class: "grid" }, svg);
  for (const t of ticks(f.span, f.narrow ? 4 : 8)) {
    const x = f.left + f.dx(t);
    el("line", { x1: x, x2: x, y1: TOP - 6, y2: plotBottom }, grid);
    el("text", { x, y: plotBottom + 16, "text-anchor": "middle" }, grid, axisLabel(t));
  }
  el("text", { x: f.left - 8, y: plotBottom + 16, "text-anchor": "end", class: "axis-name" }, grid,
    f.narrow ? "" : "since release");
  drawSolo(svg, race, f);
  drawLanes(svg, race, f, layout, rowH);
  drawInFlight(svg, race, f, y, expectedRows, rowH);
  if (race.summary) drawMarkers(svg, race, f, plotBottom);
}
