// The ping track: how long each /ping probe waited during the race, on the timeline's time axis.

import { NOTICEABLE_MS, el } from "./format.js";

export function drawPings(svg, race, f) {
  svg.replaceChildren();
  const top = 10;
  const plotH = f.narrow ? 80 : 96;
  const bottom = top + plotH;
  const height = bottom + 8;
  svg.setAttribute("viewBox", `0 0 ${f.width} ${height}`);
  svg.setAttribute("height", height);
  const pings = race ? race.pings.filter((p) => p.status === 200) : [];
  const values = pings.map((p) => p.ms).sort((a, b) => a - b);
  const max = values.length ? values[values.length - 1] : 0;
  svg.dataset.count = String(pings.length);
  svg.dataset.maxMs = max.toFixed(3);
  svg.dataset.p50Ms = values.length ? values[Math.floor((values.length - 1) / 2)].toFixed(3) : "0";
  const lo = 0.1;
  const hi = Math.max(1000, 10 ** Math.ceil(Math.log10(Math.max(max, 1))));
  const y = (value) => bottom - ((Math.log10(Math.min(hi, Math.max(lo, value))) - Math.log10(lo))
    / (Math.log10(hi) - Math.log10(lo))) * plotH;

  const grid = el("g", { class: "grid" }, svg);
  for (let v = 1; v <= hi; v *= 10) {
    el("line", { x1: f.left, x2: f.width - f.right, y1: y(v), y2: y(v), class: v === 1000 ? "second" : "" }, grid);
    el("text", { x: f.left - 6, y: y(v) + 4, "text-anchor": "end" }, grid, v >= 1000 ? `${v / 1000} s` : `${v} ms`);
  }
  const notice = el("g", { class: "notice" }, svg);
  el("line", { x1: f.left, x2: f.width - f.right, y1: y(NOTICEABLE_MS), y2: y(NOTICEABLE_MS) }, notice);
  if (!f.narrow) {
    el("text", { x: f.width - f.right - 4, y: y(NOTICEABLE_MS) - 4, "text-anchor": "end" }, notice,
      "people notice a wait");
  }
  el("text", { x: 4, y: top + 12, class: "lane-label" }, svg, f.narrow ? "/ping" : "/ping waited");
  el("line", { x1: f.left, x2: f.width - f.right, y1: bottom, y2: bottom, class: "baseline" }, svg);
  if (!race || f.origin === null) return;

  // One column per probe, as wide as it waited and as tall as its (log) wait:
  // a flat fringe when the loop is free, a comb of GIL hand-offs, a wall when blocked.
  let fast = "";
  let slow = "";
  for (const p of pings) {
    if (p.received < f.origin) continue;
    const x0 = f.x(p.sent);
    const w = Math.max(1.2, f.x(p.received) - x0);
    const rect = `M${x0.toFixed(1)} ${bottom}V${y(p.ms).toFixed(1)}h${w.toFixed(1)}V${bottom}Z`;
    if (p.ms >= NOTICEABLE_MS) slow += rect;
    else fast += rect;
  }
  el("path", { d: fast, class: "ping" }, svg);
  el("path", { d: slow, class: "ping slow" }, svg);
  const failed = race.pings.length - pings.length;
  if (failed) el("text", { x: f.left + 4, y: top + 12, class: "failed-label" }, svg, `${failed} /ping failed`);
}
