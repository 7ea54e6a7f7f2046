// The lab page: its controls, one race at a time, and "compare all modes". Modes, workloads and
// limits come from the server (/modes, /workloads, /race/options); the race itself from race.js,
// the drawing from timeline.js and pings.js, the words from words.js.

import { $, html, ms, plural, roundSpan, sec, SVG_NS, threadLabel } from "./format.js";
import { showPeers } from "./peers.js";
import { drawGil, drawPings } from "./pings.js";
import { startRace } from "./race.js";
import { drawDefs, drawTimeline, frameFor } from "./timeline.js";
import { describeRun, ratioText, summaryParagraphs } from "./words.js";

const QUIET_MS = 800; // no event for this long during a race: say why

const ui = {
  form: $("#controls"),
  mode: $("#mode"),
  modeNotes: $("#mode-notes"),
  workload: $("#workload"),
  workloadNote: $("#workload-note"),
  params: $("#params"),
  concurrency: $("#concurrency"),
  run: $("#run"),
  compare: $("#compare"),
  compareNote: $("#compare-note"),
  stop: $("#stop"),
  facts: $("#server-facts"),
  status: $("#status"),
  timeline: $("#timeline"),
  ping: $("#ping-track"),
  gil: $("#gil-track"),
  summary: $("#summary"),
  requests: $("#requests-table tbody"),
  comparison: $("#comparison"),
  comparisonTitle: $("#comparison-title"),
  compareBody: $("#compare-table tbody"),
  thumbnails: $("#thumbnails"),
  rounds: $("#rounds"),
  roundsSummary: $("#rounds-summary"),
  roundsBody: $("#rounds-table tbody"),
  roundsWarning: $("#rounds-warning"),
  peers: $("#peers"),
  peersView: $("#peers-view"),
  peersStatus: $("#peers-status"),
};

// What the server offers: modes (the registry, in order), workloads, limits, its own facts.
const catalog = { modes: new Map(), byName: new Map(), concurrency: null, server: null };
const values = new Map(); // target (a workload, or a mode that runs none) -> Map(param -> text typed)
let current = null; // the race on screen
let running = null; // its startRace handle while it runs
let stopped = false;

// ---------- controls ----------

function selectedMode() {
  return catalog.modes.get(ui.mode.value);
}

// Whose params the form shows: the workload's, or the mode's own when it runs no workload (async).
function target(mode = selectedMode()) {
  return mode.runs_workloads ? ui.workload.value : mode.name;
}

function specsFor(name) {
  const mode = catalog.modes.get(name);
  if (mode && !mode.runs_workloads) return mode.params;
  return (catalog.byName.get(name) || { params: [] }).params;
}

function valuesFor(name) {
  if (!values.has(name)) {
    values.set(name, new Map(specsFor(name).map((spec) => [spec.name, String(spec.default)])));
  }
  return values.get(name);
}

function renderParams() {
  const mode = selectedMode();
  const name = target(mode);
  const typed = valuesFor(name);
  const legend = mode.runs_workloads ? "Parameters" : `${mode.workload[0].toUpperCase()}${mode.workload.slice(1)} call`;
  ui.params.replaceChildren(html("legend", legend));
  for (const spec of specsFor(name)) {
    const id = `param-${spec.name}`;
    const wrap = html("div", null, "field");
    const label = html("label");
    label.htmlFor = id;
    label.append(spec.name, " ");
    let input;
    if (spec.type === "choice") {
      input = document.createElement("select");
      for (const choice of spec.choices) input.append(new Option(choice, choice));
    } else {
      input = document.createElement("input");
      input.type = "number";
      input.min = spec.min;
      input.max = spec.max;
      input.step = spec.type === "integer" ? "1" : "any";
      input.required = true;
      input.inputMode = spec.type === "integer" ? "numeric" : "decimal";
      label.append(html("span", `${spec.min.toLocaleString("en")}–${spec.max.toLocaleString("en")}`, "range"));
    }
    input.id = id;
    input.name = spec.name;
    input.value = typed.get(spec.name);
    input.addEventListener("input", () => typed.set(spec.name, input.value));
    wrap.append(label, input);
    if (spec.help) {
      const help = html("p", spec.help, "note");
      help.id = `${id}-help`;
      input.setAttribute("aria-describedby", help.id);
      wrap.append(help);
    }
    ui.params.append(wrap);
  }
}

// Why this server cannot run a race of `mode` on the workload chosen, or null: a mode its Python lacks
// (/modes `available`), or one that refuses the workload (/workloads `modes`).
function cannotRun(mode, workloadName = ui.workload.value) {
  if (mode.available === false) return `${mode.name} is not available here: ${mode.unavailable_reason}`;
  const workload = catalog.byName.get(workloadName);
  if (mode.runs_workloads && workload && workload.modes && !workload.modes.includes(mode.name)) {
    return `${mode.name} cannot run ${workload.name}: it needs ${listWords(workload.needs)}, which its workers `
      + "cannot load.";
  }
  return null;
}

function renderModeNotes() {
  for (const item of ui.modeNotes.querySelectorAll("li")) {
    item.classList.toggle("selected", item.dataset.mode === ui.mode.value);
  }
  const mode = selectedMode();
  ui.workload.disabled = !mode.runs_workloads;
  const workload = catalog.byName.get(ui.workload.value);
  if (!mode.runs_workloads) {
    ui.workloadNote.textContent = `${mode.name} runs no workload of its own: it ${mode.why}`;
  }
  const refusal = cannotRun(mode);
  if (refusal) {
    ui.workloadNote.textContent = refusal;
  } else if (workload && mode.runs_workloads) {
    ui.workloadNote.textContent = `${workload.description} ${workload.gil_enabled === false
      ? "This interpreter has no GIL: nothing to hold." : workload.releases_gil
        ? "Measured: releases the GIL." : "Measured: holds the GIL."}`;
  }
  renderParams();
}

// The mode list, its notes and the compare button's note, all from /modes.
function renderModes() {
  const modes = [...catalog.modes.values()];
  ui.mode.replaceChildren(...modes.map((mode) => new Option(mode.name, mode.name)));
  ui.modeNotes.replaceChildren(...modes.map((mode) => {
    const item = html("li");
    item.dataset.mode = mode.name;
    item.append(html("b", mode.name), ` ${mode.why}`);
    if (mode.available === false) item.append(html("span", ` Not on this server: ${mode.unavailable_reason}`, "note"));
    return item;
  }));
  for (const option of ui.mode.options) {
    const mode = catalog.modes.get(option.value);
    if (mode.available === false) option.textContent = `${mode.name} (not available here)`;
  }
  const own = modes.filter((mode) => !mode.runs_workloads).map((mode) => mode.name);
  const workers = modes.filter((mode) => mode.runs_workloads).map((mode) => mode.name);
  ui.compareNote.textContent = `Compare runs this race in ${listWords(workers)}${own.length
    ? `, then ${listWords(own)} with ${own.length === 1 ? "its" : "their"} own parameters` : ""}, one after another`
    + " (skipping any mode that cannot run it here).";
  ui.comparisonTitle.textContent = `All ${modes.filter((mode) => mode.available !== false).length} modes, same race`;
}

function listWords(items) {
  return items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

function renderFacts() {
  const s = catalog.server;
  if (!s) return;
  const noGil = s.gil_enabled === false ? " Its interpreter runs without a GIL (a free-threaded build): threads "
    + "compute in parallel." : "";
  ui.facts.textContent = `This server: ${plural(s.cpu_count, "core")}, ${plural(s.processes, "server process")
  }, a pool of ${plural(s.thread_pool, "thread")} and a pool of ${plural(s.process_pool, "worker process")
  } in each.${clusterFacts(s.dask)}${noGil}`;
}

// The distributed mode's cluster, as /stats describes it.
function clusterFacts(dask) {
  if (!dask) return "";
  if (!dask.embedded) {
    return ` Distributed mode: the Dask cluster at ${dask.scheduler}${dask.workers.length
      ? `, ${plural(dask.workers.length, "worker")} with ${plural(dask.threads, "thread")}` : ""}.`;
  }
  const where = dask.state === "not started" ? ", started on first use" : "";
  return ` Distributed mode: an embedded Dask cluster of ${plural(dask.threads, "single-threaded worker")}${where}.`;
}

function readRequest(modeName) {
  const mode = catalog.modes.get(modeName);
  const params = Object.fromEntries(valuesFor(target(mode)));
  return { mode: modeName, workload: mode.runs_workloads ? ui.workload.value : undefined, params,
    concurrency: Number(ui.concurrency.value) };
}

function setRunning(busy) {
  // Disabling or hiding the focused button would drop keyboard focus to the page: hand it on.
  const focused = document.activeElement;
  const hadFocus = focused === ui.run || focused === ui.compare || focused === ui.stop;
  ui.run.disabled = busy;
  ui.compare.disabled = busy;
  ui.rounds.disabled = busy;
  ui.stop.hidden = !busy;
  ui.form.setAttribute("aria-busy", busy ? "true" : "false");
  if (hadFocus) (busy ? ui.stop : ui.run).focus();
  const top = ui.status.getBoundingClientRect().top;
  // Not "smooth": an animated scroll repaints the page 60 times a second while the race starts.
  if (busy && (top < 0 || top > innerHeight * 0.6)) ui.status.scrollIntoView({ block: "start" });
}

// ---------- one race on screen ----------

// Run one race and show it; resolves with its state once the server closes the connection.
function runRace(request) {
  resetViews();
  running = startRace(request, onChange);
  current = running.race;
  draw();
  return running.finished.then((race) => {
    running = null;
    return race;
  });
}

function onChange(race, event) {
  if (race !== current) return;
  if (event && event.event === "race" && race.server) {
    catalog.server = race.server; // fresh facts: a cluster started on first use now has its workers
    renderFacts();
  }
  if (event && event.event === "done") {
    renderSummary(race);
    renderNumbers(race);
    draw(); // the finished race at once, with its summary
  }
  // The status line follows the charts (at most every DRAW_EVERY_MS), except at a change of phase,
  // and on a quiet tick (no event), which may have to say that nothing arrives.
  if (!event || race.phase !== race.phaseShown) updateStatus(race);
  if (event || race.phase === "failed") scheduleDraw();
}

function updateStatus(race) {
  const n = race.request.concurrency;
  const quietFor = (performance.now() - race.lastEventAt) / 1000;
  const mode = catalog.modes.get(race.request.mode);
  let text;
  ui.status.classList.toggle("error", race.phase === "failed");
  switch (race.phase) {
    case "connecting":
      text = "Connecting…";
      break;
    case "solo":
      text = "Timing one request alone first: that time is the t in the ideal.";
      break;
    case "racing":
      text = `Racing ${race.request.mode}: ${plural(n, "request")} released together, ${race.responses.length} answered so far.`;
      break;
    case "done":
      text = `Done: ${race.request.mode}, ${plural(n, "request")}.`;
      break;
    default:
      text = `The race did not finish. ${race.error || ""}`;
  }
  if ((race.phase === "solo" || race.phase === "racing") && quietFor * 1000 > QUIET_MS) {
    text += ` No news for ${quietFor.toFixed(1)} s: the server is busy${mode.runs_on === "event loop"
      ? ": its event loop is running a request, so it cannot even pass progress on. What happened will arrive in a burst"
      : ""}.`;
  }
  if (ui.status.textContent !== text) ui.status.textContent = text; // an unchanged line costs no layout
  race.phaseShown = race.phase;
}

// Events arrive in bursts (a response, a batch of probes every 0.1 s). Each drawing repaints the
// charts, which costs the browser more CPU than anything else it does in a race, so it draws at
// most 5 times a second and leaves the cores to the race this page is measuring.
const DRAW_EVERY_MS = 200;
let drawQueued = false;
let drawnAt = 0;
function scheduleDraw() {
  if (drawQueued) return;
  drawQueued = true;
  setTimeout(() => requestAnimationFrame(() => {
    drawQueued = false;
    drawnAt = performance.now();
    draw();
  }), Math.max(0, drawnAt + DRAW_EVERY_MS - performance.now()));
}

// What each chart was last drawn from: a chart is repainted only when that changed. The time axis
// moves in round steps (1, 2, 5, 10 s...), so while a race runs the timeline changes with each
// answer, and the tracks with each batch of probes.
const drawn = { timeline: "", tracks: "" };

function draw() {
  if (current) updateStatus(current);
  const width = Math.max(300, Math.round(ui.timeline.parentElement.clientWidth));
  const frame = frameFor(current, width);
  const race = current || { responses: [], pings: [], phase: "none", request: {} };
  const axis = `${width}|${frame.origin}|${frame.span}|${race.phase}|${race.solo}|${race.summary ? 1 : 0}`;
  const timeline = `${axis}|${race.responses.length}`;
  const tracks = `${axis}|${race.pings.length}`;
  if (timeline !== drawn.timeline) drawTimeline(ui.timeline, current, frame);
  if (tracks !== drawn.tracks) {
    drawPings(ui.ping, current, frame);
    drawGil(ui.gil, current, frame);
  }
  drawn.timeline = timeline;
  drawn.tracks = tracks;
}

function renderSummary(race) {
  ui.summary.replaceChildren(...summaryParagraphs(race, catalog).map((text) => {
    const para = document.createElement("p");
    para.innerHTML = text; // numbers, fixed words and escaped names only
    return para;
  }));
  // The numbers behind the words, for tools that drive the page (bench/page.py).
  ui.summary.dataset.summary = JSON.stringify(race.summary);
  ui.summary.dataset.ratio = String(race.summary.ratio);
}

function renderNumbers(race) {
  const rows = [...race.responses].sort((a, b) => a.index - b.index).map((r) => {
    const tr = document.createElement("tr");
    const t = r.body && r.body.timing;
    const w = r.body && r.body.worker;
    const cells = [r.index, w ? `${threadLabel(w.thread)}, pid ${w.pid}` : "–", t ? t.queued_ms.toFixed(1) : "–",
      t ? t.run_ms.toFixed(1) : "–", t && t.cpu_ms !== null ? t.cpu_ms.toFixed(1) : "–",
      ((r.received - r.sent) * 1000).toFixed(1), r.status];
    for (const cell of cells) tr.append(html("td", String(cell)));
    return tr;
  });
  ui.requests.replaceChildren(...rows);
}

function resetViews() {
  ui.summary.replaceChildren();
  delete ui.summary.dataset.summary;
  delete ui.summary.dataset.ratio;
  ui.requests.replaceChildren();
}

// ---------- compare all modes ----------

// Small multiples on one shared time scale, so lengths compare across modes.
function drawThumbnails(races) {
  const finished = races.filter((race) => race.summary);
  const span = roundSpan(Math.max(...finished.map((race) => Math.max(race.summary.elapsed_s, race.summary.ideal_s))) * 1.04);
  ui.thumbnails.replaceChildren(...races.map((race) => {
    const figure = html("figure");
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "thumbnail");
    svg.setAttribute("aria-hidden", "true");
    drawTimeline(svg, race, frameFor(race, 640, race.summary ? span : null));
    svg.removeAttribute("height");
    for (const bar of svg.querySelectorAll(".request-bar")) bar.setAttribute("class", "thumb-bar");
    figure.append(svg, html("figcaption", `${race.request.mode}: ${race.summary
      ? `all answered after ${sec(race.summary.elapsed_s)}` : "did not finish"}`));
    return figure;
  }));
}

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

function compareRow(race, round) {
  const s = race.summary;
  const mode = catalog.modes.get(race.request.mode);
  const tr = document.createElement("tr");
  const th = html("th", round ? `${race.request.mode} #${round}` : race.request.mode);
  th.scope = "row";
  tr.append(th, html("td", describeRun(race.request, mode)));
  if (!s) {
    const td = html("td", race.error || "did not finish");
    td.colSpan = 6;
    tr.append(td);
    return tr;
  }
  for (const cell of [sec(s.elapsed_s), sec(s.mean_s), sec(s.ideal_s), ratioText(s.ratio), ms(s.ping_max_ms),
    ranOn(race, mode)]) {
    tr.append(html("td", cell));
  }
  return tr;
}

// Each mode's median and range over the rounds, and a warning when its t moved more than pyperf would trust.
function showRounds(races, modes) {
  const UNSTABLE_T = 0.15;
  const spread = (values) => {
    const known = values.filter((v) => v !== null && v !== undefined).sort((a, b) => a - b);
    if (!known.length) return null;
    const mid = Math.floor(known.length / 2);
    const median = known.length % 2 ? known[mid] : (known[mid - 1] + known[mid]) / 2;
    return { median, min: known[0], max: known[known.length - 1] };
  };
  const cell = (s, show) => (s ? `${show(s.median)} (${show(s.min)}–${show(s.max)})` : "–");
  const warnings = [];
  ui.roundsBody.replaceChildren(...modes.map((mode) => {
    const done = races.filter((race) => race.request.mode === mode && race.summary).map((race) => race.summary);
    const t = spread(done.map((s) => s.solo_s));
    if (t && done.length > 1 && (t.max - t.min) / t.median > UNSTABLE_T) {
      warnings.push(`${mode}: t ranged ${sec(t.min)}–${sec(t.max)} (${Math.round(100 * (t.max - t.min) / t.median)} % `
        + "of its median)");
    }
    const tr = html("tr");
    const th = html("th", mode);
    th.scope = "row";
    tr.append(th, ...[cell(spread(done.map((s) => s.elapsed_s)), sec), cell(t, sec),
      cell(spread(done.map((s) => s.ratio)), ratioText), cell(spread(done.map((s) => s.cpu_ratio)), ratioText)]
      .map((text) => html("td", text)));
    return tr;
  }));
  ui.roundsWarning.textContent = warnings.length ? `The host was unstable: ${warnings.join("; ")}. Trust the ratio `
    + "to the runs' own CPU time over the ratio to the ideal." : "";
  ui.roundsSummary.hidden = false;
}

async function compareAll() {
  if (!ui.form.reportValidity()) return;
  stopped = false;
  setRunning(true);
  ui.comparison.hidden = true;
  delete ui.comparison.dataset.complete;
  ui.compareBody.replaceChildren();
  ui.thumbnails.replaceChildren();
  ui.roundsSummary.hidden = true;
  const results = [];
  const rounds = Number(ui.rounds.value);
  const modes = [...catalog.modes.keys()].filter((mode) => !cannotRun(catalog.modes.get(mode)));
  // Every mode once per round, in turn: a slow minute on a shared host falls on all of them alike.
  every: for (let round = 1; round <= rounds; round++) {
    for (const mode of modes) {
      if (stopped) break every;
      const race = await runRace(readRequest(mode));
      race.round = round;
      results.push(race);
      ui.compareBody.append(compareRow(race, rounds > 1 ? round : null));
      ui.comparison.hidden = false;
      if (race.phase !== "done") break every;
    }
  }
  if (rounds > 1) showRounds(results, modes);
  drawThumbnails(rounds > 1 ? results.filter((race) => race.round === 1) : results);
  ui.comparison.dataset.complete = "true";
  setRunning(false);
  return results;
}

async function runOne() {
  if (!ui.form.reportValidity()) return;
  const refusal = cannotRun(selectedMode());
  if (refusal) {
    ui.status.textContent = refusal;
    return;
  }
  stopped = false;
  setRunning(true);
  await runRace(readRequest(ui.mode.value));
  setRunning(false);
}

// ---------- start ----------

async function fetchJson(url) {
  const reply = await fetch(url, { headers: { Accept: "application/json" } });
  if (!reply.ok) throw new Error(`${url} answered ${reply.status}`);
  return reply.json();
}

async function init() {
  drawDefs();
  draw();
  new ResizeObserver(() => scheduleDraw()).observe(ui.timeline.parentElement);
  ui.form.addEventListener("submit", (event) => {
    event.preventDefault();
    runOne();
  });
  ui.compare.addEventListener("click", () => compareAll());
  ui.stop.addEventListener("click", () => {
    stopped = true;
    if (running) running.stop();
  });
  ui.peers.addEventListener("toggle", () => {
    if (ui.peers.open) showPeers(ui.peersView, ui.peersStatus).catch((error) => {
      ui.peersStatus.textContent = `Could not load the comparison: ${error.message}`;
    });
  });
  ui.mode.addEventListener("change", renderModeNotes);
  ui.workload.addEventListener("change", renderModeNotes);
  try {
    const [modes, workloads, options, stats] = await Promise.all(
      ["/modes", "/workloads", "/race/options", "/stats"].map(fetchJson));
    for (const mode of modes) if (options.modes.includes(mode.name)) catalog.modes.set(mode.name, mode);
    for (const w of workloads) catalog.byName.set(w.name, w);
    catalog.concurrency = options.concurrency;
    catalog.server = stats.server;
    ui.concurrency.min = options.concurrency.min;
    ui.concurrency.max = options.concurrency.max;
    for (const w of workloads) ui.workload.append(new Option(w.name, w.name));
    renderModes();
    renderFacts();
    renderModeNotes();
    document.body.dataset.ready = "true";
  } catch (error) {
    ui.status.textContent = `Could not load the lab's settings: ${error.message}`;
    ui.status.classList.add("error");
  }
}

init();
