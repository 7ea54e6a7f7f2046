// The peers view: the latest comparison of the lab with uWSGI and gunicorn (GET /compare, written by
// `make compare`), read-only: its question, its findings, a bar per configuration and the table.

import { PALETTE, el, html, ms, sec } from "./format.js";
import { RatioNotes, belowOne } from "./ideal.js";

const SERVERS = ["lab", "uwsgi", "gunicorn"];

function colour(server) {
  const i = SERVERS.indexOf(server);
  return PALETTE[(i < 0 ? SERVERS.length : i) % PALETTE.length];
}

function spread(row) {
  return Object.values(row.spread || {}).sort((a, b) => b - a).join("/") || "–";
}

// One bar per row: makespan over the ideal (1 is the best that server's model allows).
function chart(rows, notes) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "peers-chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "Makespan over the ideal for each configuration");
  const width = 760;
  const left = 280;
  const rowH = 20;
  const top = 18;
  const height = top + rows.length * rowH + 24;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const most = Math.max(2, ...rows.map((r) => r.ratio || 0));
  const x = (v) => left + (v / most) * (width - left - 90);
  for (const v of [0, 1, 2, 3, 4, 5].filter((t) => t <= most)) {
    el("line", { x1: x(v), x2: x(v), y1: top - 4, y2: height - 20, class: v === 1 ? "one" : "" }, svg);
    el("text", { x: x(v), y: height - 6, "text-anchor": "middle" }, svg, `${v}×`);
  }
  rows.forEach((row, i) => {
    const y = top + i * rowH;
    el("text", { x: left - 8, y: y + 14, "text-anchor": "end" }, svg,
      `${row.server} ${row.config} · ${row.workload} ×${row.concurrency}`);
    el("rect", { x: left, y: y + 3, width: Math.max(1, x(row.ratio || 0) - left), height: rowH - 6,
      fill: colour(row.server), class: "bar" }, svg);
    const below = belowOne(row.ratio);
    const label = el("text", { x: x(row.ratio || 0) + 4, y: y + 14, class: "ratio", "data-ratio": row.ratio || 0 }, svg,
      `${(row.ratio || 0).toFixed(2)}×${below ? "*" : ""} · ${spread(row)}`);
    if (below) label.setAttribute("aria-describedby", notes.note("t"));
  });
  return svg;
}

function table(rows, notes) {
  const heads = ["server", "config", "workload", "c", "all answered", "ideal", "× ideal", "/ping worst", "spread",
    "processes", "threads", "RSS MB"];
  const tbl = html("table");
  const head = html("thead");
  const tr = html("tr");
  for (const h of heads) {
    const th = html("th", h);
    th.scope = "col";
    tr.append(th);
  }
  head.append(tr);
  const body = html("tbody");
  for (const row of rows) {
    const line = html("tr");
    for (const cell of [row.server, row.config, row.workload, row.concurrency, sec(row.elapsed_s), sec(row.ideal_s)]) {
      line.append(html("td", String(cell)));
    }
    line.append(notes.cell(row.ratio || 0, "t"));
    for (const cell of [ms(row.ping_max_ms), spread(row), row.peak_processes, row.peak_threads, Math.round(row.rss_mb)]) {
      line.append(html("td", String(cell)));
    }
    body.append(line);
  }
  tbl.append(head, body);
  const scroll = html("div", null, "table-scroll");
  scroll.append(tbl);
  return scroll;
}

// Fetch and draw when the view is opened, until one load succeeds: a 404 ("run make compare") or a failed fetch
// is tried again the next time the view is opened, so a comparison made meanwhile shows without a reload.
export async function showPeers(container, status) {
  if (container.dataset.loaded) return;
  container.dataset.loaded = "loading"; // one fetch at a time
  status.textContent = "Loading the latest comparison…";
  let reply, doc;
  try {
    reply = await fetch("/compare", { headers: { Accept: "application/json" } });
    doc = await reply.json();
  } catch (error) {
    status.textContent = `The comparison could not be loaded (${error.message}); close and open this view to retry.`;
    delete container.dataset.loaded;
    return;
  }
  if (!reply.ok) {
    status.textContent = doc.error ? doc.error.message : `/compare answered ${reply.status}`;
    delete container.dataset.loaded;
    return;
  }
  container.dataset.loaded = "true";
  status.textContent = `${doc.question} From bench/results/${doc.run}${doc.quick ? " (a --quick run)" : ""}.`;
  const findings = html("ul", null, "findings");
  for (const text of doc.findings || []) findings.append(html("li", text));
  const notes = new RatioNotes(html("div", null, "ratio-notes"), "peers");
  container.replaceChildren(findings, chart(doc.rows, notes), table(doc.rows, notes), notes.container);
  container.dataset.rows = String(doc.rows.length);
}
