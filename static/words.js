// The summary in plain words. Each sentence is chosen from the measured numbers; the ideal and its
// reason come from the server (bench/ideal.py over the mode registry), and what a mode does from
// /modes: the explanations depend on where the work ran (`runs_on`), not on a list of mode names.

import { NOTICEABLE_MS, escape, ms, plural, sec } from "./format.js";

// What the responses say beyond the summary: how long runs took where they ran, how many overlapped.
export function facts(race) {
  const ok = race.responses.filter((r) => r.status === 200 && r.body && r.body.timing);
  const runs = ok.map((r) => r.body.timing.run_ms / 1000);
  const meanRun = runs.length ? runs.reduce((a, b) => a + b, 0) / runs.length : null;
  const edges = ok.flatMap((r) => [[r.body.timing.started, 1], [r.body.timing.finished, -1]])
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let running = 0;
  let overlap = 0;
  for (const [, step] of edges) overlap = Math.max(overlap, (running += step));
  const stretch = meanRun && race.summary.solo_s ? meanRun / race.summary.solo_s : null;
  return { meanRun, stretch, overlap };
}

export function describeRun(request, mode) {
  const params = Object.entries(request.params).map(([k, v]) => `${k}=${v}`).join(", ");
  const what = mode && !mode.runs_workloads ? mode.workload : request.workload;
  return `${what}${params ? ` ${params}` : ""}`;
}

export function ratioText(ratio) {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "–";
}

function ratioWords(ratio) {
  if (!Number.isFinite(ratio)) return "";
  if (ratio < 0.85) return "Faster than the estimate: the single run t comes from was slower than usual (a busy machine, or a cold start).";
  if (ratio <= 1.15) return "That is as good as this machine allows.";
  if (ratio <= 1.5) return "A little slower than ideal: the cost of handing work over, and whatever else this machine is doing.";
  return "Well short of the ideal: other programs are competing for the cores, or overheads dominate very short runs (try a bigger workload).";
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
          + `${known.overlap} requests were in progress at once, but they took turns on the GIL${turns}. So ${n} threads `
          + `could do no better than running the requests one by one.${late}`;
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
          + "a free worker. More workers than cores would not help: they would take turns on the cores instead.";
    case "cluster":
      return waits
        ? `<b>Why:</b> ${name} does not compute: each Dask worker thread waited for one request at a time, and the `
          + "others queued (hatched) for a free worker."
        : `<b>Why:</b> the scheduler handed each task to a free Dask worker process, each with its own interpreter and `
          + `its own GIL, so ${known.overlap} requests computed at once${aside}, and the rest waited (hatched) for a `
          + "worker to finish. On one machine that is the process pool plus the scheduler's hop for every task; "
          + "workers on more machines bring their own cores.";
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
      + `(Python hands the GIL over every 5 ms, and one answer needs it several times): ${noticed
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

// The summary's paragraphs as HTML: numbers, fixed words and escaped names only.
export function summaryParagraphs(race, catalog) {
  const s = race.summary;
  const request = race.request;
  const mode = catalog.modes.get(request.mode);
  const workload = catalog.byName.get(s.workload);
  const server = race.server || {};
  const known = facts(race);
  const p = [];
  p.push(`<strong>${s.concurrency} ${escape(request.mode)} requests</strong> (${escape(describeRun(request, mode))}) were all `
    + `answered after <strong>${sec(s.elapsed_s)}</strong>: the makespan. On average a client waited ${sec(s.mean_s)} `
    + `(fastest ${sec(s.shortest_s)}, slowest ${sec(s.longest_s)}).`);
  p.push(`One request alone takes <b>t = ${sec(s.solo_s)}</b>. The ideal for this server is `
    + `<strong>${sec(s.ideal_s)}</strong>: ${escape(s.ideal_words)} `
    + `This race took <strong>${ratioText(s.ratio)}</strong> the ideal. ${ratioWords(s.ratio)}`);
  p.push(whyWords(s, mode, server, workload, known));
  const shares = Object.values(s.spread || {});
  if (s.processes > 1 && shares.length) {
    const even = shares.length === s.processes && Math.max(...shares) - Math.min(...shares) <= 1;
    p.push(`The ${s.processes} server processes answered ${shares.join(" / ")} of the ${s.transactions} requests: `
      + (even ? "an even spread." : "uneven: one child accepted more than its share, and its requests waited for it "
        + "while another had room (see --accept in the README)."));
  }
  if (s.ping_count) p.push(pingWords(s, mode, workload));
  if (s.failed) {
    const statuses = [...new Set(race.responses.filter((r) => r.status !== 200).map((r) => r.status))];
    p.push(`<strong>${plural(s.failed, "request")} failed</strong> (status ${statuses.join(", ")}); `
      + "hover the crossed bars for the server's message.");
  }
  return p;
}
