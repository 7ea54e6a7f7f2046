// "Compare all modes" on screen: a row per race in the table, from pending to running to its numbers,
// the same race's numbers over several rounds, and every finished race's timeline on one time scale.

import { SVG_NS, html, plural, roundSpan, sec, ms } from "./format.js";
import { headline, tBasis } from "./ideal.js";
import { stepWords } from "./race.js";
import { drawTimeline, frameFor } from "./timeline.js";
import { describeRun } from "./words.js";

const CELLS = 7; // the columns after "mode" and "what ran"

// Where the runs of a race ran, in words: "2 processes", "6 threads", "the event loop".
function ranOn(race, mode) {
  const s = race.summary;
  const workers = (key) => new Set(race.responses.map((r) => r.body && r.body.worker && r.body.worker[key])
    .filter((value) => value !== undefined)).size;
  switch (mode.runs_on) {
    case "threads":
      return plural(workers("thread"), "thread");
    case "interpreters":
      return `${plural(workers("interpreter"), "sub-interpreter")} in ${plural(s.worker_pids.length, "process")}`;
    case "event loop":
    case "upstream":
      return "the event loop";
    default: // worker processes, of a pool or a cluster
      return plural(s.worker_pids.length, "process");
  }
}

function rowHead(request, mode, round, state) {
  const tr = html("tr", null, state);
  tr.dataset.mode = request.mode;
  tr.dataset.state = state;
  const th = html("th", round ? `${request.mode} #${round}` : request.mode);
  th.scope = "row";
  tr.append(th, html("td", describeRun(request, mode), "what"));
  return tr;
}

// A race still to come: what it will run, and that it waits its turn.
export function pendingRow(request, mode, round) {
  const tr = rowHead(request, mode, round, "pending");
  const td = html("td", "waiting its turn", "step");
  td.colSpan = CELLS;
  tr.append(td);
  return tr;
}

// The running race's row says where it is; a row no race will fill (stopped) says so.
export function showStep(tr, race) {
  tr.className = tr.dataset.state = race ? "running" : "skipped";
  const text = race ? stepWords(race, true) : "not run: the comparison stopped";
  const cell = tr.querySelector(".step");
  if (cell.textContent !== text) cell.textContent = text;
}

// A finished race's row: its makespan, the ideal it is judged against (the notes explain a ratio below 1).
export function compareRow(race, mode, round, notes) {
  const s = race.summary;
  const tr = rowHead(race.request, mode, round, s ? "done" : "failed");
  if (!s) {
    const td = html("td", race.error || "did not finish");
    td.colSpan = CELLS;
    tr.append(td);
    return tr;
  }
  const head = headline(s);
  const ideal = html("td", sec(head.ideal), "detail");
  ideal.title = head.basis === "cpu" ? "from the runs' own CPU time in this race" : `from t = ${sec(s.solo_s)}`;
  tr.append(html("td", sec(s.elapsed_s)), html("td", sec(s.mean_s), "detail"), ideal, notes.cell(head.ratio, head.basis),
    notes.cell(s.ratio, tBasis(s)), html("td", ms(s.ping_max_ms), "detail"), html("td", ranOn(race, mode), "detail"));
  return tr;
}

// Small multiples on one shared time scale, so lengths compare across modes. Each is drawn in place
// (its lane labels are measured to fit).
export function drawThumbnails(container, races) {
  const finished = races.filter((race) => race.summary);
  const longest = Math.max(...finished.map((race) => Math.max(race.summary.elapsed_s, headline(race.summary).ideal)));
  const span = finished.length ? roundSpan(longest * 1.04) : null;
  container.replaceChildren();
  for (const race of races) {
    const figure = html("figure");
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "thumbnail");
    svg.setAttribute("aria-hidden", "true");
    figure.append(svg, html("figcaption", `${race.request.mode}: ${race.summary
      ? `all answered after ${sec(race.summary.elapsed_s)}` : "did not finish"}`));
    container.append(figure);
    drawTimeline(svg, race, frameFor(race, 640, race.summary ? span : null));
    svg.removeAttribute("height");
    for (const bar of svg.querySelectorAll(".request-bar")) bar.setAttribute("class", "thumb-bar");
  }
}

function spread(values) {
  const known = values.filter((v) => v !== null && v !== undefined).sort((a, b) => a - b);
  if (!known.length) return null;
  const mid = Math.floor(known.length / 2);
  const median = known.length % 2 ? known[mid] : (known[mid - 1] + known[mid]) / 2;
  return { median, min: known[0], max: known[known.length - 1] };
}

const UNSTABLE_T = 0.15; // t moving more than this share of its median is more than pyperf would trust

// Each mode's median and range over the rounds, and a warning when its t moved.
export function showRounds(ui, races, modes, notes) {
  const show = (s, format) => (s ? `${format(s.median)} (${format(s.min)}–${format(s.max)})` : "–");
  const ratioCell = (s, basis) => (s ? notes.cell(s.min, basis, show(s, (r) => `${r.toFixed(2)}×`)) : html("td", "–"));
  const warnings = [];
  notes.reset();
  ui.roundsBody.replaceChildren(...modes.map((mode) => {
    const done = races.filter((race) => race.request.mode === mode && race.summary).map((race) => race.summary);
    const t = spread(done.map((s) => s.solo_s));
    if (t && done.length > 1 && (t.max - t.min) / t.median > UNSTABLE_T) {
      warnings.push(`${mode}: t ranged ${sec(t.min)}–${sec(t.max)} (${Math.round(100 * (t.max - t.min) / t.median)} % `
        + "of its median)");
    }
    const heads = done.map(headline);
    const tr = html("tr");
    const th = html("th", mode);
    th.scope = "row";
    tr.append(th, html("td", show(spread(done.map((s) => s.elapsed_s)), sec)), html("td", show(t, sec)),
      ratioCell(spread(heads.map((h) => h.ratio)), heads.length ? heads[0].basis : "t"),
      ratioCell(spread(done.map((s) => s.ratio)), done.length ? tBasis(done[0]) : "t"));
    return tr;
  }));
  ui.roundsWarning.textContent = warnings.length ? `The host was unstable: ${warnings.join("; ")}. The × ideal `
    + "column, from the runs' own CPU time where they compute, does not move with t." : "";
  ui.roundsSummary.hidden = false;
}
