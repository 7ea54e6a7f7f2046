// The race form: the modes and workloads the server offers (/modes, /workloads), each mode's line,
// the params of what is chosen (typed values kept per workload), the server's facts, and the request
// a race of a mode is asked with.

import { $, html, plural } from "./format.js";

const ui = {
  mode: $("#mode"),
  modeNotes: $("#mode-notes"),
  workload: $("#workload"),
  workloadNote: $("#workload-note"),
  params: $("#params"),
  concurrency: $("#concurrency"),
  compareNote: $("#compare-note"),
  facts: $("#server-facts"),
};

// What the server offers: modes (the registry, in order), workloads, limits, its own facts.
export const catalog = { modes: new Map(), byName: new Map(), concurrency: null, server: null };
const values = new Map(); // target (a workload, or a mode that runs none) -> Map(param -> text typed)

export function selectedMode() {
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
export function cannotRun(mode, workloadName = ui.workload.value) {
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
  ui.workload.disabled = !mode.runs_workloads || ui.mode.disabled; // (disabled: a comparison runs)
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
  ui.modeNotes.replaceChildren(...modes.map(modeNote));
  for (const option of ui.mode.options) {
    const mode = catalog.modes.get(option.value);
    if (mode.available === false) option.textContent = `${mode.name} (not available here)`;
  }
  const here = modes.filter((mode) => mode.available !== false);
  const own = here.filter((mode) => !mode.runs_workloads).map((mode) => mode.name);
  const workers = here.filter((mode) => mode.runs_workloads).map((mode) => mode.name);
  ui.compareNote.textContent = `Compare runs this race in ${listWords(workers)}${own.length
    ? `, then ${listWords(own)} with ${own.length === 1 ? "its" : "their"} own parameters` : ""}, one after another`
    + " (skipping any that cannot run it).";
}

// Where a mode runs the work, in a few words: its line, short enough to read whole beside its name.
const WHERE = { "event loop": "on the event loop itself", threads: "on a pool of threads",
  processes: "on worker processes", interpreters: "on sub-interpreters", cluster: "on a Dask cluster",
  upstream: "awaits an upstream" };

function gist(mode) {
  if (WHERE[mode.runs_on]) return WHERE[mode.runs_on];
  const end = mode.why.search(/[,.:;(]/);
  return end > 0 ? mode.why.slice(0, end).trim() : mode.why;
}

// A mode's line: its name and the gist of what it does, whole, on one line until opened, then all of it; a mode
// this server's Python cannot run says so on that line, and why once opened.
function modeNote(mode) {
  const item = html("li");
  item.dataset.mode = mode.name;
  const details = html("details");
  const summary = html("summary");
  const away = mode.available === false;
  summary.append(html("b", mode.name), " ", html("span", away ? "not available here" : gist(mode),
    away ? "gist unavailable" : "gist"));
  details.append(summary);
  details.append(html("p", away ? `${mode.name} ${mode.why} Not on this server: ${mode.unavailable_reason}`
    : `${mode.name} ${mode.why}`));
  item.append(details);
  return item;
}

function listWords(items) {
  return items.length < 2 ? items.join("") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

export function renderFacts() {
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

export function readRequest(modeName) {
  const mode = catalog.modes.get(modeName);
  const params = Object.fromEntries(valuesFor(target(mode)));
  return { mode: modeName, workload: mode.runs_workloads ? ui.workload.value : undefined, params,
    concurrency: Number(ui.concurrency.value) };
}


// While a comparison runs the form holds still: it is read mode by mode, and the mode shown is the one racing.
export function holdForm(held) {
  for (const control of [ui.mode, ui.concurrency, ui.params]) control.disabled = held;
  ui.workload.disabled = held || !selectedMode().runs_workloads;
}

// The mode selector and its highlighted line follow the mode racing.
export function showMode(name) {
  ui.mode.value = name;
  renderModeNotes();
}

// What the server offers, into the form: the modes its races can run, the workloads, the limits, its facts.
export function showCatalog(modes, workloads, options, server) {
  for (const mode of modes) if (options.modes.includes(mode.name)) catalog.modes.set(mode.name, mode);
  for (const w of workloads) catalog.byName.set(w.name, w);
  catalog.concurrency = options.concurrency;
  catalog.server = server;
  ui.concurrency.min = options.concurrency.min;
  ui.concurrency.max = options.concurrency.max;
  for (const w of workloads) ui.workload.append(new Option(w.name, w.name));
  ui.mode.addEventListener("change", renderModeNotes);
  ui.workload.addEventListener("change", renderModeNotes);
  renderModes();
  renderFacts();
  renderModeNotes();
}
