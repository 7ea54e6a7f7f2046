// "Compare all modes" on screen: a row per race in the table, from pending to running to its numbers,
// the same race's numbers over several rounds, and every finished race's timeline on one time scale.

import { SVG_NS, html, plural, roundSpan, sec, ms } from "./format.js";
import { headline, tBasis } from "./ideal.js";
import { stepWords } from "./race.js";
import { drawTimeline, frameFor } from "./timeline.js";
import { summaryNodes } from "./summary.js";
import { busyWords, describeRun } from "./words.js";

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

// The mode every other is set against in the table: the process pool, whose workers compute side by side.
const POOL_MODE = "processing";

// A finished race's row: its makespan, the ideal it is judged against (the notes explain a ratio below 1), and a
// cell for its makespan against the process pool's (fillVsPool, once that race is in).
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
  ideal.title += `; against t, one request timed alone before the race: ${s.ratio.toFixed(2)}×`;
  const answered = html("td", sec(s.elapsed_s));
  if (busyWords(s)) {
    answered.append(" ", html("sup", "!", "busy-mark"));
    tr.classList.add("busy");
  }
  tr.append(answered, html("td", sec(s.mean_s), "detail"), ideal, notes.cell(head.ratio, head.basis),
    html("td", "–", "vs-pool"), html("td", ms(s.ping_max_ms), "detail"), html("td", ranOn(race, mode), "detail"));
  tr.dataset.round = String(race.round || 1);
  return tr;
}

// Each finished row's makespan against the process pool's in the same round of this comparison: threading's 2.00×
// beside processing's 1.00× says at a glance what "× ideal", each mode against its own ideal, cannot.
export function fillVsPool(tbody, races) {
  for (const tr of tbody.querySelectorAll("tr[data-state=done]")) {
    const pool = races.find((race) => race.request.mode === POOL_MODE && race.summary
      && String(race.round || 1) === tr.dataset.round);
    const race = races.find((r) => r.request.mode === tr.dataset.mode && String(r.round || 1) === tr.dataset.round);
    const cell = tr.querySelector(".vs-pool");
    if (!cell || !pool || !race || !race.summary) continue;
    const ratio = race.summary.elapsed_s / pool.summary.elapsed_s;
    cell.textContent = `${ratio.toFixed(2)}×`;
    cell.dataset.ratio = String(ratio);
  }
}

// Under the table, a line for each race run while the host was busy (words.js's busyWords), and what to do.
export function showBusy(notes, races) {
  const busy = races.filter((race) => race.summary && busyWords(race.summary));
  let p = notes.container.querySelector(".busy-note");
  if (!busy.length) {
    if (p) p.remove();
    return;
  }
  if (!p) {
    p = html("p", null, "busy-note warning");
    notes.container.prepend(p);
  }
  const which = busy.map((race) => `${race.request.mode}${race.round > 1 ? ` #${race.round}` : ""} (${
    Math.round(100 * race.summary.core_wait_share)}% of its run time waiting for a core)`);
  p.textContent = `! The host was busy during ${which.join(", ")}: a mode that runs no more at once than the cores can `
    + "should hardly wait for one, so something else on this machine had them, and those rows say more about it than "
    + "about the mode. Press Compare all modes again when the machine is quieter.";
}

// Small multiples on one shared time scale, so lengths compare across modes, each with the words that explain
// it: the host-busy warning, the "Why:" and what /ping waited at once, the rest of its summary a click away. Its
// caption opens that summary and, between races, shows the race on the main charts (`onPick`). Each is drawn
// in place (its lane labels are measured to fit).
// A card's summary parts read without a click: the host-busy warning, why, and what /ping waited.
const FIRST_READ = ["busy", "why", "ping"];

export function drawThumbnails(container, races, catalog, onPick) {
  const finished = races.filter((race) => race.summary);
  const longest = Math.max(...finished.map((race) => Math.max(race.summary.elapsed_s, headline(race.summary).ideal)));
  const span = finished.length ? roundSpan(longest * 1.04) : null;
  container.replaceChildren();
  for (const race of races) {
    const figure = html("figure", null, "thumb");
    figure.dataset.mode = race.request.mode;
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "thumbnail");
    svg.setAttribute("aria-hidden", "true");
    const caption = html("button", `${race.request.mode}: ${race.summary
      ? `all answered after ${sec(race.summary.elapsed_s)}` : "did not finish"}`, "thumb-caption");
    caption.type = "button";
    const figcaption = html("figcaption");
    figcaption.append(caption);
    figure.append(svg, figcaption);
    if (race.summary) {
      const why = html("div", null, "thumb-why");
      const first = (kind) => FIRST_READ.includes(kind);
      const own = `-card-${race.request.mode}`;
      why.append(...summaryNodes(race, catalog, first, own));
      const more = html("details", null, "thumb-more");
      more.append(html("summary", "The rest of its summary"),
        ...summaryNodes(race, catalog, (kind) => !first(kind), own));
      figure.append(why, more);
      caption.title = "Show this race on the charts above, and the rest of its summary here";
      caption.setAttribute("aria-expanded", "false");
      more.addEventListener("toggle", () => caption.setAttribute("aria-expanded", String(more.open)));
      caption.addEventListener("click", () => {
        more.open = !more.open;
        if (more.open) onPick(race);
      });
    }
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
