// Which ideal a race is judged against, and the sentence every ratio below 1 comes with. The headline
// ideal is the one the host's speed cannot move: each run as long as the runs' own CPU time in the
// burst (cpu_ideal_s, from lab/race/ideal.py). Where the runs compute nothing (a sleep, the
// upstream), or wait on purpose for part of their run (mix), the ideal from t, one request timed
// alone before the race, is the headline.

import { escape, html, known } from "./format.js";

// Why a ratio reads below 1, by the ideal it is a ratio to.
const BELOW_ONE = {
  t: "Below 1 against t: t, timed alone just before the race, came out slower than the runs in the race "
    + "(this host's speed moves from minute to minute). The ideal from the runs' own CPU time does not move with it.",
  cpu: "Below 1 against the runs' own CPU time: that ideal counts every run as long as the runs' median, and some "
    + "of them computed for less.",
  wait: "Below 1 against t: these runs also wait on purpose, and their waits overlapped, which an ideal that counts "
    + "each run as holding its lane from start to finish leaves out.",
  reach: "Below 1 against what this machine can reach: t, or the copies of a loop that measured the machine, met a "
    + "slower moment than the race.",
};
const MARKS = { t: "*", cpu: "†", wait: "§", reach: "‡" };

// Runs that wait on purpose for more than this share of their run time (mix: a computation, then a wait)
// are not summed up by their CPU time: an ideal from their computing alone would be out of reach.
const OWN_WAIT_SHARE = 0.05;

// What the ideal from t rests on, for the note its ratio needs below 1: "wait" where runs counted as
// computing (they have a CPU ideal) also wait on purpose, and their waits may overlap where the ideal
// says they cannot (mix); else "t".
export function tBasis(s) {
  return known(s.cpu_ideal_s) && s.io_wait_share > OWN_WAIT_SHARE ? "wait" : "t";
}

// {ideal, ratio, basis}: the race's headline ideal and its ratio to it; basis "cpu", or tBasis's.
export function headline(s) {
  if (known(s.cpu_ideal_s) && known(s.cpu_ratio) && tBasis(s) === "t") {
    return { ideal: s.cpu_ideal_s, ratio: s.cpu_ratio, basis: "cpu" };
  }
  return { ideal: s.ideal_s, ratio: s.ratio, basis: tBasis(s) };
}

// Below 1 as shown (two decimals): 0.996 reads 1.00 and needs no excuse.
export function belowOne(ratio) {
  return Number.isFinite(ratio) && Number(ratio.toFixed(2)) < 1;
}

export function ratioText(ratio) {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "–";
}

// A ratio in a summary sentence (HTML): bold, described by its note (noteHtml, same id) where below 1.
export function ratioHtml(ratio, id) {
  const below = belowOne(ratio) ? ` aria-describedby="${escape(id)}"` : "";
  return `<strong class="ratio" data-ratio="${escape(ratio)}"${below}>${ratioText(ratio)}</strong>`;
}

// The sentence that explains `ratio` (HTML), or "" when it is not below 1.
export function noteHtml(ratio, basis, id) {
  return belowOne(ratio) ? ` <span id="${escape(id)}" class="below-one">${BELOW_ONE[basis]}</span>` : "";
}

// The ratio cells of a table, with the notes under it: each note written once, when a ratio needs it.
export class RatioNotes {
  constructor(container, prefix) {
    this.container = container;
    this.prefix = prefix;
  }

  reset() {
    this.container.replaceChildren();
  }

  // `text` in a cell; `ratio` (the lowest it shows) decides whether it needs the note for `basis`.
  cell(ratio, basis, text = ratioText(ratio)) {
    const td = html("td");
    const span = html("span", text, "ratio");
    span.dataset.ratio = String(ratio);
    td.append(span);
    if (belowOne(ratio)) {
      const id = this.note(basis);
      span.setAttribute("aria-describedby", id);
      td.append(html("sup", MARKS[basis], "mark"));
    }
    return td;
  }

  note(basis) {
    const id = `${this.prefix}-below-${basis}`;
    if (!this.container.querySelector(`#${id}`)) {
      const p = html("p", `${MARKS[basis]} ${BELOW_ONE[basis]}`, "below-one");
      p.id = id;
      this.container.append(p);
    }
    return id;
  }
}
