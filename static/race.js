// The race client: asks the server for one race over the /race WebSocket and folds its events into
// the race's state. The page never times anything itself: every number is in the events.

import { plural, sec } from "./format.js";

// `waits`: the race's workload only waits (a sleep, the upstream): what its runs did not compute was their own wait.
export function newRace(request, waits = false) {
  return {
    // warmups: the warm-up requests before them, as each ended ({sent, received, seconds, status});
    // soloRuns: the solo runs t comes from, as each ended ({run, of, sent, received, seconds}); solo: t, once
    // the race starts. pings: the probes in batches ({from, to, count, failed, p50_ms, max_ms, worst, gil,
    // core_wait}), as the load generator sends them
    request, waits, phase: "connecting", warmups: [], soloRuns: [], solo: null, server: null, capacity: null,
    responses: [], pings: [], summary: null, error: null, laneColours: new Map(), lastEventAt: performance.now(),
  };
}

// t as far as it is known: the race's, or the median of the solo runs so far.
export function soloSoFar(race) {
  if (race.solo) return race.solo;
  const seconds = race.soloRuns.map((run) => run.seconds).sort((a, b) => a - b);
  return seconds.length ? seconds[Math.floor((seconds.length - 1) / 2)] : null;
}

// The longest warm-up request so far, in seconds (0 before any).
export function longestWarmup(race) {
  return Math.max(0, ...race.warmups.map((warm) => warm.seconds));
}

// Where the race is, in a few words: "timing one request alone (run 2 of 3 took 0.35 s)…", "racing, 4 of 10
// answered…"; `brief`, fewer: "timing t alone, run 2 of 3", "racing, 4 of 10 answered".
export function stepWords(race, brief = false) {
  const n = race.request.concurrency;
  const runs = race.soloRuns;
  const last = runs[runs.length - 1];
  switch (race.phase) {
    case "connecting":
      return "connecting";
    case "solo":
      if (brief) return last ? `timing t alone, run ${last.run} of ${last.of}` : "warming up, then timing t alone";
      if (!last && race.warmups.length) {
        const warm = race.warmups[race.warmups.length - 1];
        return `warming the server up (${plural(race.warmups.length, "request")} answered, the last in ` +
          `${sec(warm.seconds)}), then timing one request alone: that time is the t in the ideal`;
      }
      return `timing one request alone (${last ? `run ${last.run} of ${last.of} took ${sec(last.seconds)}`
        : "after warming the server up"}): that time is the t in the ideal`;
    case "racing":
      return `racing, ${race.responses.length} of ${n} answered${brief ? ""
        : ` (${plural(n, "request")} released together)`}`;
    case "done":
      return `done, all answered after ${sec(race.summary.elapsed_s)}`;
    default:
      return `did not finish. ${race.error || ""}`;
  }
}

// One probe as a batch of one, so the tracks draw single "ping" events and "pings" batches alike.
function batchOfOne(ping) {
  const ok = ping.status === 200;
  return { from: ping.sent, to: ping.received, count: 1, failed: ok ? 0 : 1, p50_ms: ok ? ping.ms : null,
    max_ms: ok ? ping.ms : null, worst: ok ? { sent: ping.sent, received: ping.received, ms: ping.ms } : null,
    gil: ping.gil ?? null, core_wait: ping.core_wait ?? null };
}

// Fold one event into the race; false for an event this page does not know.
function apply(race, event) {
  switch (event.event) {
    case "start":
      race.phase = "solo";
      return true;
    case "warmup":
      race.warmups.push(event);
      return true;
    case "solo":
      race.soloRuns.push(event);
      return true;
    case "race":
      race.phase = "racing";
      race.solo = event.solo_s;
      race.server = event.server;
      race.capacity = event.capacity || null;
      return true;
    case "response":
      race.responses.push(event);
      return true;
    case "pings": // the load generator's summary of the probes of the last 100 ms
      race.pings.push(event);
      return true;
    case "ping":
      race.pings.push(batchOfOne(event));
      return true;
    case "done":
      race.phase = "done";
      race.summary = event.summary;
      return true;
    case "error":
      race.phase = "failed";
      race.error = event.message;
      return true;
    default:
      return false;
  }
}

// Run one race (`waits`: as newRace). `onChange(race, event)` runs after every event (event null: nothing new, a tick
// while the server is quiet). Returns {race, stop, finished}: `finished` resolves with the race
// once the server closes the connection; `stop()` closes it first, which kills the load generator.
export function startRace(request, onChange, waits = false) {
  const race = newRace(request, waits);
  let stopped = false;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/race`);
  const finished = new Promise((resolve) => {
    const quiet = setInterval(() => onChange(race, null), 250);
    socket.addEventListener("open", () => socket.send(JSON.stringify(request)));
    socket.addEventListener("message", (message) => {
      race.lastEventAt = performance.now();
      const event = JSON.parse(message.data);
      if (apply(race, event)) onChange(race, event);
    });
    socket.addEventListener("close", () => {
      clearInterval(quiet);
      if (race.phase !== "done" && race.phase !== "failed") {
        race.phase = "failed";
        race.error = stopped ? "Stopped: the load generator was killed."
          : "The connection to the server closed before the race ended.";
      }
      onChange(race, null);
      resolve(race);
    });
  });
  const stop = () => {
    stopped = true;
    socket.close();
  };
  return { race, stop, finished };
}
