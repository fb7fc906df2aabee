// The admission panel: the signed-in tenant's admission figures (GET /api/v1/tenant/admission). Refusals are
// what this gateway answered, by limit; admitted, waiting and tokens show "n/a" while the orchestrator serves
// them to no one (the route's module says why).

import { el } from "./dom.js";

const FIGURES = [
  ["admitted", "Admitted"],
  ["waiting", "Waiting"],
  ["refused", "Refused"],
  ["tokens", "LLM tokens"],
];

export class Admission {
  constructor(node) {
    this.node = node;
  }

  // Fetch and show the figures; a failure shows its message instead (the viewer goes on without them).
  async refresh(api) {
    let data;
    try {
      data = await api.admission();
    } catch (err) {
      this.node.replaceChildren(el("p", "muted", `Admission figures unavailable: ${err.message}`));
      return;
    }
    const rows = [];
    for (const [key, label] of FIGURES) {
      const value = data[key];
      const cell = el("dd", value === null || value === undefined ? "muted" : "", value ?? "n/a");
      if (value === null || value === undefined) cell.title = "not served by the orchestrator";
      rows.push(el("dt", "", label), cell);
      if (key !== "refused") continue;
      for (const [limit, count] of Object.entries(data.refused_by_limit || {})) {
        rows.push(el("dt", "sub", limit), el("dd", "", String(count)));
      }
    }
    this.node.replaceChildren(...rows);
    this.node.dataset.tenant = data.tenant;
  }
}
