// The lab page: controls, the race over a WebSocket, the timeline, the ping track, the summary.
// Vanilla JS and SVG; everything comes from this origin. Everything drawn comes from timestamps
// recorded by the server and the load generator, never from when an event reached the page.
"use strict";

(() => {
  const SVG_NS = "http://www.w3.org/2000/svg";
  const MODES = ["blocking", "threading", "processing", "async"];
  // Okabe–Ito: distinguishable with every common colour-vision deficiency.
  const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"];
  const ERROR_FILL = "url(#hatch-error)";
  const NOTICEABLE_MS = 100; // about where a person notices a delay
  const QUIET_MS = 800; // no event for this long during a race: say why

  const $ = (selector) => document.querySelector(selector);
  const ui = {
    form: $("#controls"),
    mode: $("#mode"),
    workload: $("#workload"),
    workloadNote: $("#workload-note"),
    params: $("#params"),
    concurrency: $("#concurrency"),
    run: $("#run"),
    compare: $("#compare"),
    stop: $("#stop"),
    facts: $("#server-facts"),
    status: $("#status"),
    timeline: $("#timeline"),
    ping: $("#ping-track"),
    summary: $("#summary"),
    requests: $("#requests-table tbody"),
    comparison: $("#comparison"),
    compareBody: $("#compare-table tbody"),
    thumbnails: $("#thumbnails"),
  };

  const catalog = { workloads: [], byName: new Map(), asyncParams: [], concurrency: null, server: null };
  const values = new Map(); // target ("async" or a workload) -> Map(param -> text typed)
  let current = null; // the race on screen
  let socket = null;
  let stopped = false;

  // ---------- small helpers ----------

  function el(tag, attrs = {}, parent = null, text = null) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (text !== null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function sec(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
    if (seconds < 0.1) return `${(seconds * 1000).toFixed(0)} ms`;
    if (seconds < 10) return `${seconds.toFixed(2)} s`;
    return `${seconds.toFixed(1)} s`;
  }

  function ms(value) {
    if (value === null || value === undefined) return "–";
    if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
    if (value >= 10) return `${value.toFixed(0)} ms`;
    return `${value.toFixed(1)} ms`;
  }

  function escape(text) {
    return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  }

  function plural(n, word) {
    if (n === 1) return `${n} ${word}`;
    return `${n} ${word.endsWith("s") ? `${word}es` : `${word}s`}`;
  }

  // "lab-thread_3" or "ThreadPoolExecutor-0_3" -> "thread 3" (the full name is in the tooltip).
  function threadLabel(thread) {
    if (thread === "MainThread") return "main thread";
    const numbered = /[_-](\d+)$/.exec(thread);
    return numbered ? `thread ${numbered[1]}` : thread.slice(0, 16);
  }

  // Ticks at 1/2/5 steps, about `count` of them.
  function ticks(span, count) {
    const raw = span / Math.max(1, count);
    const power = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
    const out = [];
    for (let t = 0; t <= span + 1e-9; t += step) out.push(+t.toFixed(6));
    return out;
  }

  // A round span a little beyond `seconds`, so the axis does not stretch on every event.
  function roundSpan(seconds) {
    const power = 10 ** Math.floor(Math.log10(Math.max(seconds, 1e-3)));
    for (const m of [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * power >= seconds) return m * power;
    return seconds;
  }

  function axisLabel(t) {
    return t === 0 ? "0" : `${+t.toFixed(3)} s`;
  }

  // ---------- controls ----------

  function target() {
    return ui.mode.value === "async" ? "async" : ui.workload.value;
  }

  function specsFor(name) {
    return name === "async" ? catalog.asyncParams : (catalog.byName.get(name) || { params: [] }).params;
  }

  function valuesFor(name) {
    if (!values.has(name)) {
      values.set(name, new Map(specsFor(name).map((spec) => [spec.name, String(spec.default)])));
    }
    return values.get(name);
  }

  function renderParams() {
    const name = target();
    const specs = specsFor(name);
    const typed = valuesFor(name);
    ui.params.replaceChildren(html("legend", name === "async" ? "Upstream call" : "Parameters"));
    for (const spec of specs) {
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

  function renderModeNotes() {
    for (const item of document.querySelectorAll("#mode-notes li")) {
      item.classList.toggle("selected", item.dataset.mode === ui.mode.value);
    }
    const isAsync = ui.mode.value === "async";
    ui.workload.disabled = isAsync;
    const workload = catalog.byName.get(ui.workload.value);
    if (isAsync) {
      ui.workloadNote.textContent = "async does no work itself: each request awaits `fanout` calls to a slow upstream.";
    } else if (workload) {
      ui.workloadNote.textContent = `${workload.description} ${workload.releases_gil
        ? "Measured: releases the GIL." : "Measured: holds the GIL."}`;
    }
    renderParams();
  }

  function renderFacts() {
    const s = catalog.server;
    if (!s) return;
    ui.facts.textContent = `This server: ${plural(s.cpu_count, "core")}, ${plural(s.processes, "server process")
    }, a pool of ${plural(s.thread_pool, "thread")} and a pool of ${plural(s.process_pool, "worker process")
    } in each.`;
  }

  function readRequest(mode) {
    const name = mode === "async" ? "async" : ui.workload.value;
    const params = Object.fromEntries(valuesFor(name));
    return { mode, workload: mode === "async" ? undefined : ui.workload.value, params,
      concurrency: Number(ui.concurrency.value) };
  }

  function setRunning(running) {
    // Disabling or hiding the focused button would drop keyboard focus to the page: hand it on.
    const focused = document.activeElement;
    const hadFocus = focused === ui.run || focused === ui.compare || focused === ui.stop;
    ui.run.disabled = running;
    ui.compare.disabled = running;
    ui.stop.hidden = !running;
    ui.form.setAttribute("aria-busy", running ? "true" : "false");
    if (hadFocus) (running ? ui.stop : ui.run).focus();
    const top = ui.status.getBoundingClientRect().top;
    if (running && (top < 0 || top > innerHeight * 0.6)) ui.status.scrollIntoView({ block: "start", behavior: "smooth" });
  }

  // ---------- the race ----------

  function newRace(request) {
    return {
      request, phase: "connecting", solo: null, server: null, responses: [], pings: [],
      summary: null, error: null, laneColours: new Map(), lastEventAt: performance.now(),
    };
  }

  // Run one race; resolves with its state once the server closes the connection.
  function runRace(request) {
    const race = newRace(request);
    current = race;
    resetViews();
    draw();
    return new Promise((resolve) => {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${scheme}//${location.host}/race`);
      const quiet = setInterval(() => updateStatus(race), 250);
      socket.addEventListener("open", () => socket.send(JSON.stringify(request)));
      socket.addEventListener("message", (message) => {
        race.lastEventAt = performance.now();
        onEvent(race, JSON.parse(message.data));
      });
      socket.addEventListener("close", () => {
        clearInterval(quiet);
        socket = null;
        if (race.phase !== "done" && race.phase !== "failed") {
          race.phase = "failed";
          race.error = stopped ? "Stopped: the load generator was killed." : "The connection to the server closed before the race ended.";
        }
        updateStatus(race);
        draw();
        resolve(race);
      });
    });
  }

  function onEvent(race, event) {
    switch (event.event) {
      case "start":
        race.phase = "solo";
        break;
      case "race":
        race.phase = "racing";
        race.solo = event.solo_s;
        race.server = event.server;
        break;
      case "response":
        race.responses.push(event);
        break;
      case "ping":
        race.pings.push(event);
        break;
      case "done":
        race.phase = "done";
        race.summary = event.summary;
        renderSummary(race);
        renderNumbers(race);
        break;
      case "error":
        race.phase = "failed";
        race.error = event.message;
        break;
      default:
        return;
    }
    updateStatus(race);
    scheduleDraw();
  }

  function updateStatus(race) {
    if (race !== current) return;
    const n = race.request.concurrency;
    const quietFor = (performance.now() - race.lastEventAt) / 1000;
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
      text += ` No news for ${quietFor.toFixed(1)} s: the server is busy${race.request.mode === "blocking"
        ? ": its event loop is running a request, so it cannot even pass progress on. What happened will arrive in a burst"
        : ""}.`;
    }
    ui.status.textContent = text;
  }

  // ---------- drawing ----------

  let drawQueued = false;
  function scheduleDraw() {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => {
      drawQueued = false;
      draw();
    });
  }

  function draw() {
    const width = Math.max(300, Math.round(ui.timeline.parentElement.clientWidth));
    const frame = frameFor(current, width);
    drawTimeline(ui.timeline, current, frame);
    drawPings(ui.ping, current, frame);
  }

  // The time axis shared by the timeline and the ping track.
  function frameFor(race, width, fixedSpan = null) {
    const narrow = width < 560;
    const left = narrow ? 78 : 150;
    const right = narrow ? 10 : 24;
    let origin = null;
    let latest = null;
    if (race) {
      const sent = race.responses.map((r) => r.sent);
      origin = sent.length ? Math.min(...sent) : race.pings.length ? race.pings[0].sent : null;
      const ends = race.responses.map((r) => r.received).concat(race.pings.map((p) => p.received));
      latest = ends.length ? Math.max(...ends) : origin;
    }
    let span = origin === null ? 1 : latest - origin;
    if (race && race.solo) span = Math.max(span, race.solo);
    if (race && race.summary) span = Math.max(span, race.summary.ideal_s, race.summary.elapsed_s);
    span = fixedSpan || roundSpan(Math.max(span * 1.04, 0.01));
    const plot = width - left - right;
    return {
      width, left, right, narrow, origin, span, plot,
      x: (t) => left + Math.max(0, Math.min(1, (t - origin) / span)) * plot,
      dx: (seconds) => (seconds / span) * plot,
    };
  }

  function laneKey(response) {
    const worker = response.body && response.body.worker;
    return worker ? `${worker.pid}|${worker.thread}` : "failed";
  }

  function lanesOf(race) {
    const lanes = new Map();
    for (const response of race.responses) {
      const key = laneKey(response);
      if (!race.laneColours.has(key) && key !== "failed") race.laneColours.set(key, race.laneColours.size);
      if (!lanes.has(key)) lanes.set(key, { key, rows: [] });
      lanes.get(key).rows.push(response);
    }
    const start = (r) => (r.body && r.body.timing ? r.body.timing.started : r.sent);
    const ordered = [...lanes.values()];
    for (const lane of ordered) lane.rows.sort((a, b) => start(a) - start(b));
    ordered.sort((a, b) => {
      if (a.key === "failed" || b.key === "failed") return a.key === "failed" ? 1 : -1;
      const [pa, ta] = a.key.split("|");
      const [pb, tb] = b.key.split("|");
      return Number(pa) - Number(pb) || ta.localeCompare(tb, "en", { numeric: true });
    });
    return ordered;
  }

  // [name, second line]: the event loop, a worker process, or a thread of the server's pool.
  function laneLabel(lane, narrow) {
    if (lane.key === "failed") return ["no answer", ""];
    const [pid, thread] = lane.key.split("|");
    const first = lane.rows[0].body;
    if (thread === "MainThread" && first.server && String(first.server.pid) === pid) return ["event loop", `pid ${pid}`];
    if (thread === "MainThread") return [narrow ? `pid ${pid}` : `worker pid ${pid}`, ""];
    return [threadLabel(thread), `pid ${pid}`];
  }

  function drawTimeline(svg, race, f) {
    svg.replaceChildren();
    const top = 36;
    const soloRow = 22;
    const axisH = 26;
    if (!race) {
      const h = 120;
      svg.setAttribute("viewBox", `0 0 ${f.width} ${h}`);
      svg.setAttribute("height", h);
      el("text", { x: f.width / 2, y: h / 2, class: "placeholder", "text-anchor": "middle" }, svg,
        "Each request will appear here as a bar, in lanes by the worker that ran it.");
      return;
    }
    const lanes = lanesOf(race);
    const rows = Math.max(race.request.concurrency, race.responses.length);
    const rowH = Math.max(7, Math.min(24, Math.floor((f.narrow ? 300 : 380) / rows)));
    const laneGap = 6;
    const minLane = 16;
    let y = top + soloRow + 8;
    const layout = lanes.map((lane) => {
      const height = Math.max(minLane, lane.rows.length * rowH);
      const entry = { lane, y, height };
      y += height + laneGap;
      return entry;
    });
    const expectedRows = Math.max(0, race.request.concurrency - race.responses.length);
    const plotBottom = Math.max(y + expectedRows * rowH, top + soloRow + 8 + minLane);
    const height = plotBottom + axisH;
    svg.setAttribute("viewBox", `0 0 ${f.width} ${height}`);
    svg.setAttribute("height", height);

    // Lane bands, then grid and axis, then bars on top.
    const bands = el("g", { class: "bands" }, svg);
    const grid = el("g", { class: "grid" }, svg);
    for (const t of ticks(f.span, f.narrow ? 4 : 8)) {
      const x = f.left + f.dx(t);
      el("line", { x1: x, x2: x, y1: top - 6, y2: plotBottom }, grid);
      el("text", { x, y: plotBottom + 16, "text-anchor": "middle" }, grid, axisLabel(t));
    }
    el("text", { x: f.left - 8, y: plotBottom + 16, "text-anchor": "end", class: "axis-name" }, grid,
      f.narrow ? "" : "since release");

    // Reference: one request on an idle server.
    const ref = el("g", { class: "solo" }, svg);
    el("text", { x: f.left - 8, y: top + soloRow / 2 + 4, "text-anchor": "end", class: "lane-label" }, ref,
      f.narrow ? "alone" : "one request alone");
    if (race.solo) {
      const w = Math.max(2, f.dx(race.solo));
      el("rect", { x: f.left, y: top + 3, width: w, height: soloRow - 6, rx: 2 }, ref);
      const text = `t = ${sec(race.solo)}`;
      const outside = f.left + w + 8 + text.length * 7 <= f.width;
      el("text", { x: outside ? f.left + w + 6 : f.left + w - 6, y: top + soloRow / 2 + 4,
        "text-anchor": outside ? "start" : "end", class: outside ? "solo-label" : "solo-label inside" }, ref, text);
    } else if (race.phase === "solo") {
      el("text", { x: f.left + 6, y: top + soloRow / 2 + 4, class: "solo-label" }, ref, "timing it…");
    }

    // Lanes.
    const clients = el("g", { class: "clients" }, svg);
    const bars = el("g", { class: "bars" }, svg);
    layout.forEach(({ lane, y: laneY, height: laneH }, i) => {
      el("rect", { x: 0, y: laneY - laneGap / 2, width: f.width, height: laneH + laneGap,
        class: i % 2 ? "lane-band odd" : "lane-band" }, bands);
      const colour = lane.key === "failed" ? "#000" : PALETTE[race.laneColours.get(lane.key) % PALETTE.length];
      const [name, sub] = laneLabel(lane, f.narrow);
      const label = el("g", { class: "lane-label" }, svg);
      el("title", {}, label, lane.key === "failed" ? "requests that got no answer" : `pid ${lane.key.replace("|", ", thread ")}`);
      el("rect", { x: 4, y: laneY + 2, width: 6, height: Math.min(12, laneH - 4), fill: colour, class: "lane-swatch" }, label);
      el("text", { x: 14, y: laneY + 12 }, label, name);
      if (sub && laneH >= 28) el("text", { x: 14, y: laneY + 25, class: "lane-sub" }, label, sub);
      const rowHere = Math.min(rowH, laneH / lane.rows.length);
      lane.rows.forEach((response, j) => {
        const rowY = laneY + j * rowHere;
        drawBar(bars, clients, response, f, rowY, rowHere, colour, race);
      });
    });

    // Ideal and actual finish, once known: one label row each, so they never collide.
    if (race.summary) {
      const s = race.summary;
      const markers = el("g", { class: "markers" }, svg);
      const mark = (seconds, label, className, labelY) => {
        const x = f.x(f.origin + seconds);
        el("line", { x1: x, x2: x, y1: labelY + 3, y2: plotBottom, class: className }, markers);
        const fits = x + 4 + label.length * 6.6 <= f.width;
        el("text", { x: fits ? x + 4 : x - 4, y: labelY, "text-anchor": fits ? "start" : "end",
          class: `${className}-label` }, markers, label);
      };
      mark(s.elapsed_s, `all answered ${sec(s.elapsed_s)}`, "finish", 12);
      mark(s.ideal_s, `ideal ${sec(s.ideal_s)}`, "ideal", 26);
    }
  }

  function drawBar(bars, clients, response, f, y, h, colour, race) {
    const body = response.body || {};
    const timing = body.timing;
    const worker = body.worker || {};
    const mid = y + h / 2;
    const pad = h >= 10 ? 1.5 : 0.75;
    el("line", { x1: f.x(response.sent), x2: f.x(response.received), y1: mid, y2: mid, class: "client-wait" }, clients);
    const bar = el("g", {
      class: "request-bar",
      "data-index": response.index,
      "data-pid": worker.pid ?? "",
      "data-thread": worker.thread ?? "",
      "data-status": response.status,
      "data-queued-ms": timing ? timing.queued_ms : "",
      "data-run-ms": timing ? timing.run_ms : "",
    }, bars);
    const title = el("title", {}, bar);
    if (timing && response.status === 200) {
      const xr = f.x(timing.received);
      const xs = f.x(timing.started);
      const xf = f.x(timing.finished);
      if (xs - xr >= 0.5) {
        el("rect", { x: xr, y: y + pad, width: xs - xr, height: h - 2 * pad, fill: `url(#hatch-${PALETTE.indexOf(colour)})`,
          stroke: colour, class: "queue" }, bar);
      }
      el("rect", { x: xs, y: y + pad, width: Math.max(1.5, xf - xs), height: h - 2 * pad, fill: colour, class: "run" }, bar);
      title.textContent = `request ${response.index}: waited ${ms(timing.queued_ms)} for a worker, ran ${ms(timing.run_ms)} `
        + `on ${worker.thread} of pid ${worker.pid}; the client waited ${ms((response.received - response.sent) * 1000)}`;
    } else {
      const xa = f.x(response.sent);
      const xb = f.x(response.received);
      el("rect", { x: xa, y: y + pad, width: Math.max(2, xb - xa), height: h - 2 * pad, fill: ERROR_FILL, class: "failed" }, bar);
      if (h >= 10) el("text", { x: xb + 4, y: y + h / 2 + 4, class: "failed-label" }, bar, `✕ ${response.status || "no answer"}`);
      const message = body.error ? body.error.message : "";
      title.textContent = `request ${response.index} failed with status ${response.status}${message ? `: ${message}` : ""}`;
    }
    return race;
  }

  function drawPings(svg, race, f) {
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

  function drawDefs() {
    const defs = $("#defs defs");
    PALETTE.forEach((colour, i) => {
      const pattern = el("pattern", { id: `hatch-${i}`, width: 6, height: 6, patternUnits: "userSpaceOnUse",
        patternTransform: "rotate(45)" }, defs);
      el("rect", { width: 6, height: 6, fill: colour, "fill-opacity": 0.14 }, pattern);
      el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: colour, "stroke-width": 2.2 }, pattern);
    });
    const error = el("pattern", { id: "hatch-error", width: 6, height: 6, patternUnits: "userSpaceOnUse" }, defs);
    el("rect", { width: 6, height: 6, fill: "#fff" }, error);
    el("path", { d: "M0 0L6 6M6 0L0 6", stroke: "#000", "stroke-width": 1.2 }, error);
  }

  // ---------- words ----------

  // What the responses say beyond the summary: how long runs took where they ran, how many overlapped.
  function facts(race) {
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

  function renderSummary(race) {
    const s = race.summary;
    const request = race.request;
    const workload = catalog.byName.get(s.workload);
    const holdsGil = workload ? !workload.releases_gil : false;
    const server = race.server || {};
    const known = facts(race);
    const p = [];

    p.push(`<strong>${s.concurrency} ${request.mode} requests</strong> (${describeRunHtml(request)}) were all answered `
      + `after <strong>${sec(s.elapsed_s)}</strong>: the makespan. On average a client waited ${sec(s.mean_s)} `
      + `(fastest ${sec(s.shortest_s)}, slowest ${sec(s.longest_s)}).`);
    p.push(`One request alone takes <b>t = ${sec(s.solo_s)}</b>. The ideal for this server is `
      + `<strong>${sec(s.ideal_s)}</strong>: ${idealWords(s, request, server, holdsGil)} `
      + `This race took <strong>${ratioText(s.ratio)}</strong> the ideal. ${ratioWords(s.ratio)}`);
    p.push(whyWords(s, request, server, holdsGil, known));
    if (s.ping_count) p.push(pingWords(s, request, holdsGil));
    if (s.failed) {
      const statuses = [...new Set(race.responses.filter((r) => r.status !== 200).map((r) => r.status))];
      p.push(`<strong>${plural(s.failed, "request")} failed</strong> (status ${statuses.join(", ")}); `
        + "hover the crossed bars for the server's message.");
    }
    ui.summary.replaceChildren(...p.map((text) => {
      const para = document.createElement("p");
      para.innerHTML = text; // numbers, fixed words and escaped names only
      return para;
    }));
  }

  function describeRun(request) {
    const params = Object.entries(request.params).map(([k, v]) => `${k}=${v}`).join(", ");
    return request.mode === "async" ? `upstream ${params}` : `${request.workload}${params ? ` ${params}` : ""}`;
  }

  function describeRunHtml(request) {
    return escape(describeRun(request));
  }

  function ratioText(ratio) {
    return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "–";
  }

  function idealWords(s, request, server, holdsGil) {
    const rounds = s.lanes ? Math.ceil(s.concurrency / s.lanes) : 1;
    const t = sec(s.solo_s);
    const name = escape(s.workload);
    // Forked servers (--processes N): one at a time *per server process*.
    const oneAtATime = s.processes > 1
      ? `one request at a time in each of ${s.processes} server processes: ${plural(rounds, "round")} of ${t}.`
      : `one request at a time: ${s.concurrency} × ${t}.`;
    switch (request.mode) {
      case "blocking":
        return `the event loop runs ${oneAtATime}`;
      case "threading":
        return holdsGil
          ? `${name} holds the GIL, so however many threads there are, it runs ${oneAtATime}`
          : `${name} releases the GIL, so ${plural(s.lanes, "request")} can run at once `
            + `(${plural(server.thread_pool, "thread")}${s.workload === "sleep" ? "" : `, ${plural(s.cores, "core")}`}): `
            + `${plural(rounds, "round")} of ${t}.`;
      case "processing":
        return `${plural(s.lanes, "worker process")} can compute at once on ${plural(s.cores, "core")}: `
          + `${plural(rounds, "round")} of ${t}.`;
      default:
        return `every call waits at the upstream at the same time, so about one wait, ${t}.`;
    }
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

  function whyWords(s, request, server, holdsGil, known) {
    const n = s.concurrency;
    const name = escape(s.workload);
    const stretch = stretchWords(known);
    const aside = stretch ? ` (${stretch})` : "";
    switch (request.mode) {
      case "blocking":
        return "<b>Why:</b> each request ran on the event loop itself, so "
          + (s.processes > 1 ? "each server process served its share strictly one after another " : "they were served strictly one after another ")
          + `(the staircase): the first client had its answer after ${sec(s.shortest_s)}, the last waited `
          + `${sec(s.longest_s)}. The dotted lines are clients waiting before the server even looked at their request.`;
      case "threading":
        if (holdsGil) {
          const turns = known.stretch >= 1.5 ? `, so ${stretch}` : "";
          const late = s.shortest_s >= 2 * s.solo_s
            ? ` Even the first answer came only after ${sec(s.shortest_s)}, when one run alone takes ${sec(s.solo_s)}.` : "";
          return `<b>Why:</b> the pure-Python loop holds the GIL, so only one thread can run it at any moment. Up to `
            + `${known.overlap} requests were in progress at once, but they took turns on the GIL${turns}. So ${n} threads `
            + `could do no better than running the requests one by one.${late}`;
        }
        return s.workload === "sleep"
          ? `<b>Why:</b> sleep releases the GIL while it waits, so up to ${known.overlap} requests waited side by side${aside}; `
            + `only the ${plural(server.thread_pool, "thread")} of the pool limit how many at once.`
          : `<b>Why:</b> ${name} spends its time in C code that releases the GIL, so threads really ran in parallel${aside}, `
            + `but no more at once than the ${plural(s.cores, "core")} can run.`;
      case "processing":
        return s.workload === "sleep"
          ? "<b>Why:</b> sleep does not compute, so processes help only as threads would: each worker waited for one "
            + "request at a time, and the others queued (hatched) for a free worker."
          : `<b>Why:</b> each worker process has its own interpreter and its own GIL, so ${known.overlap} requests `
            + `computed at once, one per worker${aside}, and the rest waited in the server's queue (hatched) for `
            + "a free worker. More workers than cores would not help: they would take turns on the cores instead.";
      default:
        return `<b>Why:</b> no thread and no process did the waiting: the event loop awaited all ${n} requests' `
          + "upstream calls at once. Async helps when the work is waiting; it cannot make computing faster.";
    }
  }

  function pingWords(s, request, holdsGil) {
    const worst = s.ping_max_ms;
    const noticed = worst >= NOTICEABLE_MS;
    let why;
    if (request.mode === "blocking") {
      why = "while a request runs on the event loop the server answers nothing at all, not even /ping: the wall in the track.";
    } else if (request.mode === "threading" && holdsGil) {
      why = "the event loop was free, but answering needs the GIL, and it had to queue for it behind the busy threads "
        + `(Python hands the GIL over every 5 ms, and one answer needs it several times): ${noticed
          ? "here the waits added up to a wall." : "the comb of short waits in the track."}`;
    } else if (noticed) {
      why = "the event loop only hands work out and collects results, yet the machine itself was busy: the workers, the "
        + "load generator and the server share its cores.";
    } else {
      why = `the event loop only hands work out and collects results${request.mode === "threading"
        ? ", and the threads hardly needed the GIL," : ","} so it stayed free to answer.`;
    }
    return `Meanwhile <code>/ping</code>, probed ${plural(s.ping_count, "time")}, waited ${ms(s.ping_p50_ms)} typically and `
      + `<strong>${ms(worst)}</strong> at worst${noticed ? ", long enough for a person to notice" : ""}: ${why}`;
  }

  function renderNumbers(race) {
    const rows = [...race.responses].sort((a, b) => a.index - b.index).map((r) => {
      const tr = document.createElement("tr");
      const t = r.body && r.body.timing;
      const w = r.body && r.body.worker;
      const cells = [r.index, w ? `${threadLabel(w.thread)}, pid ${w.pid}` : "–", t ? t.queued_ms.toFixed(1) : "–",
        t ? t.run_ms.toFixed(1) : "–", ((r.received - r.sent) * 1000).toFixed(1), r.status];
      for (const cell of cells) tr.append(html("td", String(cell)));
      return tr;
    });
    ui.requests.replaceChildren(...rows);
  }

  function resetViews() {
    ui.summary.replaceChildren();
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

  function compareRow(race) {
    const s = race.summary;
    const tr = document.createElement("tr");
    const th = html("th", race.request.mode);
    th.scope = "row";
    tr.append(th, html("td", describeRun(race.request)));
    if (!s) {
      const td = html("td", race.error || "did not finish");
      td.colSpan = 6;
      tr.append(td);
      return tr;
    }
    const where = s.lanes === null ? "the event loop"
      : race.request.mode === "processing" ? plural(s.worker_pids.length, "process")
        : race.request.mode === "threading"
          ? plural(new Set(race.responses.map((r) => r.body && r.body.worker && r.body.worker.thread)).size, "thread")
          : "the event loop";
    for (const cell of [sec(s.elapsed_s), sec(s.mean_s), sec(s.ideal_s), ratioText(s.ratio), ms(s.ping_max_ms), where]) {
      tr.append(html("td", cell));
    }
    return tr;
  }

  async function compareAll() {
    if (!ui.form.reportValidity()) return;
    stopped = false;
    setRunning(true);
    ui.comparison.hidden = true;
    delete ui.comparison.dataset.complete;
    ui.compareBody.replaceChildren();
    ui.thumbnails.replaceChildren();
    const results = [];
    for (const mode of MODES) {
      if (stopped) break;
      const race = await runRace(readRequest(mode));
      results.push(race);
      ui.compareBody.append(compareRow(race));
      ui.comparison.hidden = false;
      if (race.phase !== "done") break;
    }
    drawThumbnails(results);
    ui.comparison.dataset.complete = "true";
    setRunning(false);
    return results;
  }

  async function runOne() {
    if (!ui.form.reportValidity()) return;
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
      if (socket) socket.close();
    });
    ui.mode.addEventListener("change", renderModeNotes);
    ui.workload.addEventListener("change", renderModeNotes);
    try {
      const [workloads, options, stats] = await Promise.all(
        ["/workloads", "/race/options", "/stats"].map(fetchJson));
      catalog.workloads = workloads;
      for (const w of workloads) catalog.byName.set(w.name, w);
      catalog.asyncParams = options.async_params;
      catalog.concurrency = options.concurrency;
      catalog.server = stats.server;
      ui.concurrency.min = options.concurrency.min;
      ui.concurrency.max = options.concurrency.max;
      for (const w of workloads) ui.workload.append(new Option(w.name, w.name));
      renderFacts();
      renderModeNotes();
      document.body.dataset.ready = "true";
    } catch (error) {
      ui.status.textContent = `Could not load the lab's settings: ${error.message}`;
      ui.status.classList.add("error");
    }
  }

  init();
})();
