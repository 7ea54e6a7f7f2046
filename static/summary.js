// A race's summary as paragraphs on the page: the race on screen's, and each compared race's card.

import { summaryParts } from "./words.js";

// The summary's paragraphs as <p> elements, each classed by its kind ("part-why", "part-busy"...);
// `keep(kind)` picks which, in the summary's order; `suffix` makes the ids of its notes (and the references to
// them) its own, where several summaries share the page.
export function summaryNodes(race, catalog, keep = () => true, suffix = "") {
  return summaryParts(race, catalog).filter((part) => keep(part.kind)).map((part) => {
    const para = document.createElement("p");
    para.className = `part-${part.kind}${part.kind === "busy" ? " warning" : ""}`;
    para.innerHTML = part.html; // numbers, fixed words and escaped names only
    if (suffix) {
      for (const node of para.querySelectorAll("[id]")) node.id += suffix;
      for (const node of para.querySelectorAll("[aria-describedby]")) {
        node.setAttribute("aria-describedby", `${node.getAttribute("aria-describedby")}${suffix}`);
      }
    }
    return para;
  });
}
