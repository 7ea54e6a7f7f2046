// The summary in plain words. Each sentence is chosen from the measured numbers; the ideal and its
// reason come from the server (bench/ideal.py over the mode registry), and what a mode does from
// /modes: the explanations depend on where the work ran (`runs_on`), not on a list of mode names.

import { split } from "./bars.js";
import { NOTICEABLE_MS, escape, known as told, ms, plural, sec } from "./format.js";
import { headline, noteHtml, ratioHtml, tBasis } from "./ideal.js";

// What the responses say beyond the summary: how long runs took where they ran, how much of that
// they computed (their CPU time), how many overlapped.
export function facts(race) {
  const ok = race.responses.filter((r) => r.status === 200 && r.body && r.body.timing);
  const runs = ok.map((r) => r.body.timing.run_ms / 1000);
  const meanRun = runs.length ? runs.reduce((a, b) => a + b, 0) / runs.length : null;
  // The mean of a timing part in seconds, where every answered run reports it (else null).
  const mean = (part) => {
    const values = ok.map((r) => r.body.timing[part]).filter((v) => v !== null && v !== undefined);
    return values.length === runs.length && values.length ? values.reduce((a, b) => a + b, 0) / values.length / 1000 : null;
  };
  const meanCpu = mean("cpu_ms");
  // Blocked by something other than the GIL or the run's own wait (bars.js's split, as the bars are drawn).
  const others = ok.map((r) => split(r.body.timing, race.waits).other).filter((other) => other !== null);
  const meanOtherBlocked = others.length === runs.length && others.length
    ? others.reduce((a, b) => a + b, 0) / others.length / 1000 : null;
  const edges = ok.flatMap((r) => [[r.body.timing.started, 1], [r.body.timing.finished, -1]])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let running = 0;
  let overlap = 0;
  for (const [, step] of edges) overlap = Math.max(overlap, (running += step));
  const stretch = meanRun && race.summary.solo_s ? meanRun / race.summary.solo_s : null;
  return { meanRun, meanCpu, meanCoreWait: mean("core_wait_ms"), meanGilWait: mean("gil_wait_ms"),
    meanOwnWait: mean("io_wait_ms"), meanOtherBlocked, stretch, overlap };
}

// "Each thread computed 0.20 s on average and took 1.20 s from start to finish: it waited 0.90 s (75%) for
// the GIL and 0.10 s (8%) for a core." From the envelopes' own split where they have one (and what
// blocked them that was not the GIL, where it counts); else only what computing leaves, with
// `waitingFor` naming what it waited for.
function cpuWords(known, who, waitingFor) {
  if (known.meanCpu === null || !known.meanRun) return "";
  const head = ` Each ${who} computed ${sec(known.meanCpu)} on average and took ${sec(known.meanRun)} from start to `
    + "finish: ";
  const part = (seconds, what) => `${sec(seconds)} (<strong>${Math.round(100 * seconds / known.meanRun)}%</strong>) ${what}`;
  if (known.meanCoreWait !== null) {
    const waits = [[known.meanGilWait, "for the GIL"], [known.meanCoreWait, "for a core"],
      [known.meanOwnWait, "on purpose (its own wait)"]]
      .filter(([seconds]) => seconds !== null && seconds >= 0.005).sort((a, b) => b[0] - a[0]);
    const other = known.meanOtherBlocked !== null && known.meanOtherBlocked >= 0.005
      ? ` It was blocked ${part(known.meanOtherBlocked, "by something other than the GIL")}.` : "";
    if (!waits.length) return `${head}it hardly waited at all.${other}`;
    const told = waits.map(([seconds, what]) => part(seconds, what));
    return `${head}it waited ${[told.slice(0, -1).join(", "), told[told.length - 1]].filter(Boolean).join(" and ")
    }.${other}`;
  }
  const waiting = Math.round(100 * Math.max(0, 1 - known.meanCpu / known.meanRun));
  return `${head}<strong>${waiting}%</strong> of it waiting for ${waitingFor}.`;
}

export function describeRun(request, mode) {
  const params = Object.entries(request.params).map(([k, v]) => `${k}=${v}`).join(", ");
  const what = mode && !mode.runs_workloads ? mode.workload : request.workload;
  return `${what}${params ? ` ${params}` : ""}`;
}

// The verdict, against the headline ideal where it comes from the runs' own CPU time (which the host's
// speed does not move), else against what this machine can reach where that was measured, and never
// outside the noise the single runs showed: a difference inside it is no news. Below that, the ratio's
// own note says why.
function ratioWords(s) {
  const head = headline(s);
  const against = head.basis === "cpu" ? head.ratio : s.reachable_ratio ?? s.ratio;
  if (!Number.isFinite(against)) return "";
  const noise = Math.max(0.15, s.solo_spread || 0);
  if (against < 1 - noise) return "";
  if (against <= 1 + noise) {
    return `That is as good as this machine allows: the difference is within the noise of the single runs (${
      Math.round(100 * (s.solo_spread || 0))}% between the fastest and the slowest).`;
  }
  if (against <= 1.5) {
    return "A little slower than it could be: the cost of handing work over, and whatever else this machine ran "
      + "meanwhile (the load generator and this browser among them).";
  }
  return "Well short of what this machine can do: something else competed for the cores, or overheads dominate very "
    + "short runs (try a bigger workload).";
}

// The ideal's words (lab/race/ideal.py: "…: 5 rounds of 0.35 s.") with another t.
function withT(words, solo, t) {
  const tail = `${sec(solo)}.`;
  return words.endsWith(tail) ? `${words.slice(0, -tail.length)}${sec(t)}` : `${words.replace(/\.$/, "")} (t = ${sec(t)})`;
}

// What this machine can reach where runs go at once, as measured with copies of a loop.
function reachWords(s, capacity) {
  if (!capacity || !told(s.slowdown)) return "";
  if (s.slowdown <= 1.02) {
    return ` This machine lives up to it: ${capacity.copies} copies of a loop at once ran as fast as one alone.`;
  }
  return ` But runs at once are slower here than one alone: when this machine ran ${capacity.copies} copies of a `
    + `loop together, each took <b>${s.slowdown.toFixed(2)}×</b> as long (about ${capacity.effective_cores.toFixed(1)} `
    + "cores' worth of parallel work: a virtual machine shares its cores), so from t the best it can reach is "
    + `<strong>${sec(s.reachable_ideal_s)}</strong>, and the race took ${ratioHtml(s.reachable_ratio, "summary-below-reach")
    } that.${noteHtml(s.reachable_ratio, "reach", "summary-below-reach")}`;
}

// The headline ideal and the race's ratio to it; where that is the runs' own CPU time, t and the
// ideal from it beside. Every ratio below 1 comes with its sentence.
function idealWords(s, capacity) {
  const samples = s.solo_samples_s || [];
  const spread = samples.length > 1
    ? ` (${samples.length} runs: ${sec(Math.min(...samples))}–${sec(Math.max(...samples))})` : "";
  const alone = `<b>t = ${sec(s.solo_s)}</b>${spread}`;
  const fromT = `the race took ${ratioHtml(s.ratio, "summary-below-t")} that.${
    noteHtml(s.ratio, tBasis(s), "summary-below-t")}`;
  if (headline(s).basis !== "cpu") {
    return `One request alone took ${alone}. The ideal for this server is <strong>${sec(s.ideal_s)}</strong>: `
      + `${escape(s.ideal_words)} ${fromT[0].toUpperCase()}${fromT.slice(1)}${reachWords(s, capacity)} ${ratioWords(s)}`;
  }
  const cpuT = s.cpu_ideal_s / Math.max(1, Math.round(s.ideal_s / s.solo_s));
  return `The ideal for this server is <strong>${sec(s.cpu_ideal_s)}</strong>: ${escape(withT(s.ideal_words, s.solo_s,
    cpuT))}, each run as long as the runs' own CPU time in this race (their median), which the host's speed does not `
    + `move. The race took ${ratioHtml(s.cpu_ratio, "summary-below-cpu")} that.${
      noteHtml(s.cpu_ratio, "cpu", "summary-below-cpu")} ${ratioWords(s)} Timed alone before the race, one request `
    + `took ${alone}: from it the ideal is ${sec(s.ideal_s)}, and ${fromT}${reachWords(s, capacity)}`;
}

// Processes and sub-interpreters do not share a GIL, so a worker started but not computing waited for a
// core, or was blocked by something else: the cores are blamed, never the GIL (a Dask worker's own few
// milliseconds of it are its process's other threads).
function coreWords(known, who) {
  if (known.meanCpu === null || !known.meanRun || known.meanCpu / known.meanRun > 0.9) return "";
  return cpuWords({ ...known, meanGilWait: null }, who,
    "a core (busy with other processes, or lent to another virtual machine)");
}

// The GIL meter, told apart from starved cores by the core meter read over the same windows: threads
// that wait for a core while one of them holds the GIL make the others wait for it too.
function gilWords(s) {
  if (s.gil_max === null || s.gil_max === undefined) return "";
  const busy = s.gil_max >= 0.5;
  const starved = s.core_wait_max !== null && s.core_wait_max !== undefined && s.core_wait_max >= 0.5;
  const reading = `The GIL meter in the server process read ${s.gil_p50.toFixed(2)} typically and `
    + `<strong>${s.gil_max.toFixed(2)}</strong> at worst (0: a thread that wants the GIL gets it at once; 1: it always `
    + "has to wait)";
  if (!busy) return `${reading}: nobody had to queue for it for long.`;
  if (starved) {
    return `${reading}, while its threads waited for a core up to ${s.core_wait_max.toFixed(2)} of the time: `
      + "they were short of cores, and a thread holding the GIL without a core makes the others wait for it too.";
  }
  return `${reading}: the server's threads were queueing for it.`;
}

function stretchWords(known) {
  if (!known.meanRun || !known.stretch) return "";
  return `each run took ${sec(known.meanRun)} where it ran, <strong>${known.stretch.toFixed(1)}×</strong> as long as alone`;
}

function whyWords(s, mode, server, workload, known) {
  const n = s.concurrency;
  const name = escape(s.workload);
  const holdsGil = workload ? !workload.releases_gil : false;
  const waits = workload ? workload.waits : false;
  const stretch = stretchWords(known);
  const aside = stretch ? ` (${stretch})` : "";
  switch (mode.runs_on) {
    case "event loop":
      return "<b>Why:</b> each request ran on the event loop itself, so "
        + (s.processes > 1 ? "each server process served its share strictly one after another " : "they were served strictly one after another ")
        + `(the staircase): the first client had its answer after ${sec(s.shortest_s)}, the last waited `
        + `${sec(s.longest_s)}. The dotted lines are clients waiting before the server even looked at their request.`;
    case "threads":
      if (holdsGil) {
        const turns = known.stretch >= 1.5 ? `, so ${stretch}` : "";
        const late = s.shortest_s >= 2 * s.solo_s
          ? ` Even the first answer came only after ${sec(s.shortest_s)}, when one run alone takes ${sec(s.solo_s)}.` : "";
        return `<b>Why:</b> the pure-Python loop holds the GIL, so only one thread can run it at any moment. Up to `
          + `${known.overlap} requests were in progress at once, but they took turns on the GIL${turns}.`
          + `${cpuWords(known, "thread", "the GIL")} So ${n} threads could do no better than running the requests one `
          + `by one.${late}`;
      }
      return waits
        ? `<b>Why:</b> ${name} releases the GIL while it waits, so up to ${known.overlap} requests waited side by side${aside}; `
          + `only the ${plural(server.thread_pool, "thread")} of the pool limit how many at once.`
        : `<b>Why:</b> ${name} spends its time in C code that releases the GIL, so threads really ran in parallel${aside}, `
          + `but no more at once than the ${plural(s.cores, "core")} can run.`;
    case "processes":
      return waits
        ? `<b>Why:</b> ${name} does not compute, so processes help only as threads would: each worker waited for one `
          + "request at a time, and the others queued (hatched) for a free worker."
        : `<b>Why:</b> each worker process has its own interpreter and its own GIL, so ${known.overlap} requests `
          + `computed at once, one per worker${aside}, and the rest waited in the server's queue (hatched) for `
          + "a free worker. More workers than cores would not help: they would take turns on the cores instead."
          + coreWords(known, "worker");
    case "interpreters":
      return waits
        ? `<b>Why:</b> ${name} does not compute: each sub-interpreter waited for one request at a time, and the `
          + "others queued (hatched) for a free one."
        : `<b>Why:</b> each sub-interpreter has its own GIL, so ${known.overlap} requests computed at once in one `
          + `process${aside}, and the rest waited in the server's queue (hatched) for a free interpreter: the `
          + "parallelism of a process pool without a second process. More interpreters than cores would not help."
          + coreWords(known, "interpreter");
    case "cluster":
      return waits
        ? `<b>Why:</b> ${name} does not compute: each Dask worker thread waited for one request at a time, and the `
          + "others queued (hatched) for a free worker."
        : `<b>Why:</b> the scheduler handed each task to a free Dask worker process, each with its own interpreter and `
          + `its own GIL, so ${known.overlap} requests computed at once${aside}, and the rest waited (hatched) for a `
          + "worker to finish. On one machine that is the process pool plus the scheduler's hop for every task; "
          + "workers on more machines bring their own cores." + coreWords(known, "worker");
    case "upstream":
      return `<b>Why:</b> no thread and no process did the waiting: the event loop awaited all ${n} requests' `
        + "upstream calls at once. Async helps when the work is waiting; it cannot make computing faster.";
    default:
      return `<b>Why:</b> ${escape(mode.name)} ${escape(mode.why)} Up to ${known.overlap} requests ran at once${aside}.`;
  }
}

function pingWords(s, mode, workload) {
  const holdsGil = workload ? !workload.releases_gil : false;
  const worst = s.ping_max_ms;
  const noticed = worst >= NOTICEABLE_MS;
  let why;
  if (mode.runs_on === "event loop") {
    why = "while a request runs on the event loop the server answers nothing at all, not even /ping: the wall in the track.";
  } else if (mode.runs_on === "threads" && holdsGil) {
    why = "the event loop was free, but answering needs the GIL, and it had to queue for it behind the busy threads "
      + "(Python hands the GIL over every 5 ms, and one answer needs it several times; a bare Tornado server "
      + `waits about as long, measured side by side in docs/results.md#overhead): ${noticed
        ? "here the waits added up to a wall." : "the comb of short waits in the track."}`;
  } else if (noticed) {
    why = "the event loop only hands work out and collects results, yet the machine itself was busy: the workers, the "
      + "load generator and the server share its cores.";
  } else {
    why = `the event loop only hands work out and collects results${mode.runs_on === "threads"
      ? ", and the threads hardly needed the GIL," : ","} so it stayed free to answer.`;
  }
  return `Meanwhile <code>/ping</code>, probed ${plural(s.ping_count, "time")}, waited ${ms(s.ping_p50_ms)} typically and `
    + `<strong>${ms(worst)}</strong> at worst${noticed ? ", long enough for a person to notice" : ""}: ${why}`;
}

// A mode that runs no more at once than the cores can (a lane per core or fewer, or only waits) should hardly
// wait for a core; where its runs did for more than this share of their time, other programs had the cores.
export const BUSY_CORE_WAIT = 0.2;

// The warning a race needs when the host was busy during it (HTML), or "".
export function busyWords(s) {
  const fits = s.lanes === null || s.lanes === undefined || s.lanes <= s.cores;
  if (!fits || !Number.isFinite(s.core_wait_share) || s.core_wait_share < BUSY_CORE_WAIT) return "";
  return `<strong>The host was busy during this race:</strong> its runs waited <strong>${
    Math.round(100 * s.core_wait_share)}%</strong> of their time for a core, in a mode that runs no more at once than `
    + `the ${plural(s.cores, "core")} can. Something else on this machine had the cores, so these numbers say more `
    + "about it than about the mode: run it again when the machine is quieter.";
}

// The summary's parts as HTML, each with its kind ("headline", "busy", "ideal", "why", "spread", "ping", "gil",
// "failed"): numbers, fixed words and escaped names only.
export function summaryParts(race, catalog) {
  const s = race.summary;
  const request = race.request;
  const mode = catalog.modes.get(request.mode);
  const workload = catalog.byName.get(s.workload);
  const server = race.server || {};
  const known = facts(race);
  const p = [];
  const add = (kind, html) => { if (html) p.push({ kind, html }); };
  add("headline", `<strong>${s.concurrency} ${escape(request.mode)} requests</strong> (${escape(describeRun(request, mode))}) `
    + `were all answered after <strong>${sec(s.elapsed_s)}</strong>: the makespan. On average a client waited `
    + `${sec(s.mean_s)} (fastest ${sec(s.shortest_s)}, slowest ${sec(s.longest_s)}).`);
  add("busy", busyWords(s));
  add("ideal", idealWords(s, race.capacity));
  add("why", whyWords(s, mode, server, workload, known));
  const shares = Object.values(s.spread || {});
  if (s.processes > 1 && shares.length) {
    const even = shares.length === s.processes && Math.max(...shares) - Math.min(...shares) <= 1;
    add("spread", `The ${s.processes} server processes answered ${shares.join(" / ")} of the ${s.transactions} `
      + "requests: " + (even ? "an even spread." : "uneven: one child accepted more than its share, and its requests "
        + "waited for it while another had room (see --accept in docs/modes.md)."));
  }
  if (s.ping_count) add("ping", pingWords(s, mode, workload));
  add("gil", server.gil_enabled === false
    ? "No GIL meter reading: this interpreter runs without a GIL (a free-threaded build), so there is none to wait for."
    : gilWords(s));
  if (s.failed) {
    const statuses = [...new Set(race.responses.filter((r) => r.status !== 200).map((r) => r.status))];
    add("failed", `<strong>${plural(s.failed, "request")} failed</strong> (status ${statuses.join(", ")}); `
      + "hover the crossed bars for the server's message.");
  }
  return p;
}

// The summary's paragraphs as HTML.
export function summaryParagraphs(race, catalog) {
  return summaryParts(race, catalog).map((part) => part.html);
}
