// A race's summary as paragraphs on the page: the race on screen's, and each compared race's card.

import { summaryParts } from "./words.js";

// The summary's paragraphs as <p> elements, each classed by its kind ("part-why", "part-busy"...);
// `keep(kind)` picks which, in the summary's order.
export function summaryNodes(race, catalog, keep = () => true) {
  return summaryParts(race, catalog).filter((part) => keep(part.kind)).map((part) => {
    const para = document.createElement("p");
    para.className = `part-${part.kind}${part.kind === "busy" ? " warning" : ""}`;
    para.innerHTML = part.html; // numbers, fixed words and escaped names only
    return para;
  });
}
