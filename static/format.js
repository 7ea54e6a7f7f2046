// Small helpers every part of the page shares: SVG and HTML nodes, numbers as words, axis ticks.

export const SVG_NS = "http://www.w3.org/2000/svg";
// Okabe–Ito: distinguishable with every common colour-vision deficiency. One per worker; its pink is the
// GIL meter's and its black a request that got no answer, so no worker is drawn in them.
export const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#56B4E9", "#D55E00", "#F0E442"];
export const NOTICEABLE_MS = 100; // about where a person notices a delay

export const $ = (selector) => document.querySelector(selector);

export const known = (value) => value !== null && value !== undefined;

export function el(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

export function html(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (className) node.className = className;
  return node;
}

export function sec(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  if (seconds < 0.1) return `${(seconds * 1000).toFixed(0)} ms`;
  if (seconds < 10) return `${seconds.toFixed(2)} s`;
  return `${seconds.toFixed(1)} s`;
}

export function ms(value) {
  if (value === null || value === undefined) return "–";
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  if (value >= 10) return `${value.toFixed(0)} ms`;
  return `${value.toFixed(1)} ms`;
}

export function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function plural(n, word) {
  if (n === 1) return `${n} ${word}`;
  return `${n} ${word.endsWith("s") ? `${word}es` : `${word}s`}`;
}

// "lab-thread_3" or "ThreadPoolExecutor-0_3" -> "thread 3" (the full name is in the tooltip).
export function threadLabel(thread) {
  if (thread === "MainThread") return "main thread";
  const numbered = /[_-](\d+)$/.exec(thread);
  return numbered ? `thread ${numbered[1]}` : thread.slice(0, 16);
}

// Ticks at 1/2/5 steps, about `count` of them.
export function ticks(span, count) {
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
  const out = [];
  for (let t = 0; t <= span + 1e-9; t += step) out.push(+t.toFixed(6));
  return out;
}

// A round span a little beyond `seconds`, so the axis does not stretch on every event.
export function roundSpan(seconds) {
  const power = 10 ** Math.floor(Math.log10(Math.max(seconds, 1e-3)));
  for (const m of [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) if (m * power >= seconds) return m * power;
  return seconds;
}

export function axisLabel(t) {
  return t === 0 ? "0" : `${+t.toFixed(3)} s`;
}
