// The header hvprof's HTML pages share (the flame graph's and the time line's), put into each at
// build time (report/CMakeLists.txt): its style, the title and the facts, data.facts being [term, value,
// warning] each. What changes the reading of the numbers (losses, an incomplete session, the
// sampling) stays in view; warnings, notes and problems are folded into one line that opens on a
// click, so that the picture starts on the first screen however many there are.
function hvprofHeader(data) {
  "use strict";
  const style = document.createElement("style");
  style.textContent = [
    "#facts, .facts { display: grid; grid-template-columns: max-content 1fr; gap: 1px 12px; margin: 0 0 6px; }",
    "#facts dt, .facts dt { color: #666; }",
    "#facts dd, .facts dd { margin: 0; }",
    "#facts dd.warning, .facts dd.warning, #folded-facts summary.warning { color: #a40000; }",
    "#folded-facts { margin: 0 0 6px; }",
    "#folded-facts summary { cursor: pointer; }",
  ].join("\n");
  document.head.append(style);
  document.getElementById("title").textContent = data.title;
  document.title = data.title;
  const FOLDED = new Set(["Warning", "Note", "Problem"]);
  function add(list, term, value, warning) {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    if (warning) dd.className = "warning";
    list.append(dt, dd);
  }
  const facts = document.getElementById("facts");
  const folded = [];
  for (const [term, value, warning] of data.facts) {
    if (FOLDED.has(term)) folded.push([term, value, warning]);
    else add(facts, term, value, warning);
  }
  if (folded.length === 0) return;
  const details = document.createElement("details");
  details.id = "folded-facts";
  const summary = document.createElement("summary");
  const warnings = folded.filter(([, , warning]) => warning).length;
  const notes = folded.length - warnings;
  const parts = [];
  if (warnings) parts.push(warnings + (warnings === 1 ? " warning" : " warnings"));
  if (notes) parts.push(notes + (notes === 1 ? " note" : " notes"));
  summary.textContent = parts.join(" and ") + " (click to read)";
  if (warnings) summary.className = "warning";
  const list = document.createElement("dl");
  list.className = "facts";
  for (const [term, value, warning] of folded) add(list, term, value, warning);
  details.append(summary, list);
  details.dataset.warnings = String(warnings);
  details.dataset.notes = String(notes);
  facts.after(details);
}
