// The tracks under the timeline, on its time axis: how long /ping waited during the race, and how
// contended the server's GIL was. Both are drawn from the load generator's batches of probes (one
// per 100 ms: the worst wait and the GIL reading), not from each of the hundreds of probes.

import { NOTICEABLE_MS, el } from "./format.js";

// Numbers the tests and tools read from the track: probes, and their waits.
function describe(svg, race) {
  const batches = race ? race.pings : [];
  const count = batches.reduce((n, b) => n + b.count, 0);
  const failed = batches.reduce((n, b) => n + b.failed, 0);
  const worst = batches.reduce((m, b) => Math.max(m, b.max_ms ?? 0), 0);
  const s = race && race.summary;
  svg.dataset.count = String(count);
  svg.dataset.maxMs = worst.toFixed(3);
  svg.dataset.p50Ms = String(s && s.ping_p50_ms !== null ? s.ping_p50_ms : 0);
  return { batches, failed, worst };
}

// Clear `svg` and size it for a plot `plotH` high between margins `top` and `below`; the plot's bottom edge.
function frame(svg, f, top, plotH, below) {
  svg.replaceChildren();
  const bottom = top + plotH;
  const height = bottom + below;
  svg.setAttribute("viewBox", `0 0 ${f.width} ${height}`);
  svg.setAttribute("height", height);
  return bottom;
}

export function drawPings(svg, race, f) {
  const top = 10;
  const plotH = f.narrow ? 80 : 96;
  const bottom = frame(svg, f, top, plotH, 8);
  const { batches, failed, worst } = describe(svg, race);
  const lo = 0.1;
  const hi = Math.max(1000, 10 ** Math.ceil(Math.log10(Math.max(worst, 1))));
  const y = (value) => bottom - ((Math.log10(Math.min(hi, Math.max(lo, value))) - Math.log10(lo))
    / (Math.log10(hi) - Math.log10(lo))) * plotH;

  const grid = el("g", { class: "grid" }, svg);
  for (let v = 1; v <= hi; v *= 10) {
    el("line", { x1: f.left, x2: f.width - f.right, y1: y(v), y2: y(v), class: v === 1000 ? "second" : "" }, grid);
    el("text", { x: f.left - 6, y: y(v) + 4, "text-anchor": "end" }, grid, v >= 1000 ? `${v / 1000} s` : `${v} ms`);
  }
  const notice = el("g", { class: "notice" }, svg);
  el("line", { x1: f.left, x2: f.width - f.right, y1: y(NOTICEABLE_MS), y2: y(NOTICEABLE_MS) }, notice);
  // Its words go on top of the probes' bars, on a halo of the background (.notice-label), so that no wall hides them.
  const noticeLabel = () => {
    if (f.narrow) return;
    el("text", { x: f.width - f.right - 4, y: y(NOTICEABLE_MS) - 4, "text-anchor": "end", class: "notice-label" }, svg,
      "people notice a wait");
  };
  el("text", { x: 4, y: top + 12, class: "lane-label" }, svg, f.narrow ? "/ping" : "/ping waited");
  el("line", { x1: f.left, x2: f.width - f.right, y1: bottom, y2: bottom, class: "baseline" }, svg);
  if (!race || f.origin === null) {
    noticeLabel();
    return;
  }

  // The worst probe of each batch, as wide as it waited and as tall as its (log) wait: a flat
  // fringe when the loop is free, a comb of GIL hand-offs, a wall when the loop is blocked.
  let fast = "";
  let slow = "";
  for (const batch of batches) {
    const p = batch.worst;
    if (!p || p.received < f.origin) continue;
    const x0 = f.x(p.sent);
    const w = Math.max(1.2, f.x(p.received) - x0);
    const rect = `M${x0.toFixed(1)} ${bottom}V${y(p.ms).toFixed(1)}h${w.toFixed(1)}V${bottom}Z`;
    if (p.ms >= NOTICEABLE_MS) slow += rect;
    else fast += rect;
  }
  el("path", { d: fast, class: "ping" }, svg);
  el("path", { d: slow, class: "ping slow" }, svg);
  noticeLabel();
  if (failed) el("text", { x: f.left + 4, y: top + 12, class: "failed-label" }, svg, `${failed} /ping failed`);
}

// The GIL meter (gilknocker in the server process), 0 to 1, as the probes' answers reported it:
// one step per batch, from the first probe to the last answer it covers; over it, as a line, the
// core meter (its threads' run-queue share over the same windows), so that threads starved of
// cores, which also make each other wait for the GIL, are told apart from threads taking turns.
export function drawGil(svg, race, f) {
  const top = 8;
  const plotH = f.narrow ? 36 : 44;
  const bottom = frame(svg, f, top, plotH, 6);
  const y = (value) => bottom - Math.max(0, Math.min(1, value)) * plotH;
  const grid = el("g", { class: "grid" }, svg);
  for (const v of [0, 0.5, 1]) {
    el("line", { x1: f.left, x2: f.width - f.right, y1: y(v), y2: y(v) }, grid);
    el("text", { x: f.left - 6, y: y(v) + 4, "text-anchor": "end" }, grid, String(v));
  }
  el("text", { x: 4, y: top + 12, class: "lane-label" }, svg, f.narrow ? "GIL" : "GIL contention");
  const readings = race ? race.pings.filter((b) => b.gil !== null && b.gil !== undefined) : [];
  svg.dataset.count = String(readings.length);
  svg.dataset.max = readings.length ? String(Math.max(...readings.map((b) => b.gil))) : "";
  if (!race || f.origin === null) return;
  if (!readings.length && race.pings.length) {
    // A free-threaded server has no GIL to meter: n/a, not 0. Its core meter still reads.
    const none = race.server && race.server.gil_enabled === false ? "n/a: no GIL (a free-threaded build)"
      : "not measured by this server";
    el("text", { x: f.left + 4, y: top + 12, class: "placeholder" }, svg, none);
  }
  let d = "";
  for (const b of readings) {
    if (b.to < f.origin) continue;
    const x0 = f.x(b.from);
    const w = Math.max(1, f.x(b.to) - x0);
    d += `M${x0.toFixed(1)} ${bottom}V${y(b.gil).toFixed(1)}h${w.toFixed(1)}V${bottom}Z`;
  }
  if (d) el("path", { d, class: "gil" }, svg);
  const cores = race.pings.filter((b) => b.to >= f.origin && b.core_wait !== null && b.core_wait !== undefined);
  svg.dataset.coreMax = cores.length ? String(Math.max(...cores.map((b) => b.core_wait))) : "";
  if (cores.length) {
    const line = cores.map((b, i) => `${i ? "L" : "M"}${f.x(b.from).toFixed(1)} ${y(b.core_wait).toFixed(1)}`
      + `H${Math.max(f.x(b.from) + 1, f.x(b.to)).toFixed(1)}`).join("");
    el("path", { d: line, class: "core-wait-line" }, svg);
  }
}
