// The lab page: one race at a time, and "compare all modes". The form and what the server offers
// (/modes, /workloads, /race/options) are controls.js's; the race itself race.js's, the drawing
// timeline.js's, bars.js's and pings.js's, the comparison's rows compare.js's, the words words.js's.

import { drawDefs } from "./bars.js";
import { compareRow, drawThumbnails, fillVsPool, pendingRow, showBusy, showRounds, showStep } from "./compare.js";
import { cannotRun, catalog, holdForm, readRequest, renderFacts, selectedMode, showCatalog, showMode } from "./controls.js";
import { $, html, threadLabel } from "./format.js";
import { RatioNotes } from "./ideal.js";
import { showPeers } from "./peers.js";
import { drawGil, drawPings } from "./pings.js";
import { startRace, stepWords } from "./race.js";
import { drawTimeline, frameFor } from "./timeline.js";
import { summaryNodes } from "./summary.js";

const QUIET_MS = 800; // no event for this long during a race: say why
const SHOW_FINISHED_MS = 1500; // in a comparison, each finished race's timeline before the next one's

const ui = {
  form: $("#controls"),
  run: $("#run"),
  compare: $("#compare"),
  stop: $("#stop"),
  status: $("#status"),
  timeline: $("#timeline"),
  ping: $("#ping-track"),
  gil: $("#gil-track"),
  summary: $("#summary"),
  requests: $("#requests-table tbody"),
  comparison: $("#comparison"),
  compareBody: $("#compare-table tbody"),
  timelines: $("#timelines"),
  thumbnails: $("#thumbnails"),
  rounds: $("#rounds"),
  roundsSummary: $("#rounds-summary"),
  roundsBody: $("#rounds-table tbody"),
  roundsWarning: $("#rounds-warning"),
  peers: $("#peers"),
  peersView: $("#peers-view"),
  peersStatus: $("#peers-status"),
};

let current = null; // the race on screen
let running = null; // its startRace handle while it runs
let stopped = false;
let comparing = null; // while comparing: {row, at, of}, the running race's row in the table and its place
const compareNotes = new RatioNotes($("#compare-notes"), "compare");
const roundsNotes = new RatioNotes($("#rounds-notes"), "rounds");

// While a comparison runs the form holds still (holdForm). `busy` false gives the form back.
function setRunning(busy, compare = false) {
  // Disabling or hiding the focused button would drop keyboard focus to the page: hand it on.
  const focused = document.activeElement;
  const hadFocus = focused === ui.run || focused === ui.compare || focused === ui.stop;
  ui.run.disabled = busy;
  ui.compare.disabled = busy;
  ui.rounds.disabled = busy;
  holdForm(busy && compare);
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
  const mode = catalog.modes.get(request.mode);
  const workload = catalog.byName.get(request.workload);
  running = startRace(request, onChange, !mode.runs_workloads || Boolean(workload && workload.waits));
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

// The status line: which mode, where its race is, and in a comparison which of the modes it is.
function updateStatus(race) {
  const quietFor = (performance.now() - race.lastEventAt) / 1000;
  const mode = catalog.modes.get(race.request.mode);
  const step = stepWords(race);
  ui.status.classList.toggle("error", race.phase === "failed");
  let text = race.phase === "failed" ? `The race did not finish. ${race.error || ""}` : `${race.request.mode}: ${step}.`;
  if (comparing && comparing.row) {
    text = `Comparing all modes, ${comparing.at} of ${comparing.of}. ${race.request.mode}: ${step}.`;
    showStep(comparing.row, race);
  } else if (comparing) {
    text = `Compared ${comparing.at} of ${comparing.of} races: the table below, and every timeline on one time `
      + "scale under the summary, each with its own summary (its caption shows it here). Shown here"
      + `${comparing.picked ? "" : ", the last"}: ${text}`;
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
let shortestGap = Infinity;
function scheduleDraw() {
  if (drawQueued) return;
  drawQueued = true;
  setTimeout(() => requestAnimationFrame(() => {
    drawQueued = false;
    const now = performance.now();
    if (drawnAt) {
      // The shortest time between two of these draws so far, for tools that drive the page: #timeline's
      // data-shortest-gap-ms.
      shortestGap = Math.min(shortestGap, now - drawnAt);
      ui.timeline.dataset.shortestGapMs = String(Math.floor(shortestGap));
    }
    drawnAt = now;
    draw();
  }), Math.max(0, drawnAt + DRAW_EVERY_MS - performance.now()));
}

// What each chart was last drawn from: a chart is repainted only when that changed. The time axis
// moves in round steps (1, 2, 5, 10 s...), so while a race runs the timeline changes with each
// answer, and the tracks with each batch of probes.
const drawn = { timeline: "", tracks: "" };
let draws = 0; // how many times the page has drawn: #timeline's data-draws, for tools that drive it

function draw() {
  ui.timeline.dataset.draws = String(++draws);
  if (current) updateStatus(current);
  const width = Math.max(300, Math.round(ui.timeline.parentElement.clientWidth));
  const frame = frameFor(current, width);
  const race = current || { responses: [], pings: [], phase: "none", request: {} };
  const axis = `${width}|${frame.origin}|${frame.span}|${race.phase}|${race.solo}|${race.summary ? 1 : 0}`;
  // While requests are in flight, each batch of probes moves their clients' lines on.
  const inFlight = race.phase === "racing" && race.responses.length < race.request.concurrency;
  const timeline = `${axis}|${race.responses.length}|${race.soloRuns ? race.soloRuns.length : 0}|${
    race.warmups ? race.warmups.length : 0}|${inFlight ? race.pings.length : ""}`;
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
  ui.summary.replaceChildren(...summaryNodes(race, catalog));
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

// Every mode that can run this race, once per round, in turn (a slow minute on a shared host falls on
// all of them alike): each race's request and its row in the table, pending until its turn.
function comparePlan(rounds) {
  const modes = [...catalog.modes.values()].filter((mode) => !cannotRun(mode));
  const plan = [];
  for (let round = 1; round <= rounds; round++) {
    for (const mode of modes) {
      const request = readRequest(mode.name);
      plan.push({ mode, round, request, row: pendingRow(request, mode, rounds > 1 ? round : null) });
    }
  }
  return plan;
}

function showTimelines(races) {
  ui.timelines.hidden = false;
  drawThumbnails(ui.thumbnails, races.filter((race) => race.round === 1), catalog, showCompared);
}

// A compared race back on the main charts, with its /ping and GIL tracks, summary and numbers (its card's caption).
function showCompared(race) {
  if (running || !race.summary) return false;
  current = race;
  showMode(race.request.mode);
  renderSummary(race);
  renderNumbers(race);
  if (comparing) comparing.picked = race.request.mode;
  draw();
  ui.timeline.scrollIntoView({ block: "start" });
  return true;
}

async function compareAll() {
  if (!ui.form.reportValidity()) return;
  stopped = false;
  const rounds = Number(ui.rounds.value);
  const plan = comparePlan(rounds);
  setRunning(true, true);
  delete ui.comparison.dataset.complete;
  compareNotes.reset();
  ui.compareBody.replaceChildren(...plan.map((entry) => entry.row));
  ui.roundsSummary.hidden = true;
  ui.timelines.hidden = true;
  ui.comparison.hidden = false;
  const results = [];
  for (const [i, entry] of plan.entries()) {
    if (stopped) break;
    comparing = { row: entry.row, at: i + 1, of: plan.length };
    showMode(entry.mode.name);
    const race = await runRace(entry.request);
    race.round = entry.round;
    results.push(race);
    const row = compareRow(race, entry.mode, rounds > 1 ? entry.round : null, compareNotes);
    entry.row.replaceWith(row);
    fillVsPool(ui.compareBody, results);
    showBusy(compareNotes, results);
    showTimelines(results);
    if (race.phase !== "done") break;
    // A race whose answers came in one burst (blocking's: its loop passes nothing on while it runs them)
    // would be drawn only as the next race replaces it: each finished race stays in sight a moment.
    if (i < plan.length - 1) await new Promise((resolve) => setTimeout(resolve, SHOW_FINISHED_MS));
  }
  comparing = { row: null, at: results.length, of: plan.length };
  for (const entry of plan.slice(results.length)) showStep(entry.row, null);
  if (rounds > 1) showRounds(ui, results, [...new Set(plan.map((entry) => entry.mode.name))], roundsNotes);
  ui.comparison.dataset.complete = "true";
  setRunning(false);
  if (current) updateStatus(current);
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
  comparing = null;
  setRunning(true);
  await runRace(readRequest(selectedMode().name));
  setRunning(false);
}

// ---------- start ----------

async function fetchJson(url) {
  const reply = await fetch(url, { headers: { Accept: "application/json" } });
  if (!reply.ok) throw new Error(`${url} answered ${reply.status}`);
  return reply.json();
}

async function init() {
  drawDefs($("#defs defs"));
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
  try {
    const [modes, workloads, options, stats] = await Promise.all(
      ["/modes", "/workloads", "/race/options", "/stats"].map(fetchJson));
    showCatalog(modes, workloads, options, stats.server);
    document.body.dataset.ready = "true";
  } catch (error) {
    ui.status.textContent = `Could not load the lab's settings: ${error.message}`;
    ui.status.classList.add("error");
  }
}

init();
