// The admission panel: the signed-in tenant's admission figures (GET /api/v1/tenant/admission), summed over
// every orchestrator replica, and its limits. When the orchestrator does not answer, the route gives only the
// refusals this gateway answered (`source: "gateway"`): the rest shows "n/a" and a note says why.

import { el } from "./dom.js";

const FIGURES = [
  ["admitted", "Admitted"],
  ["refused", "Refused"],
  ["running", "Running"],
  ["waiting", "Waiting"],
  ["tokens_last_minute", "LLM tokens, last minute"],
  ["tokens", "LLM tokens"],
];

const LIMITS = [
  ["concurrent_runs", "concurrent runs"],
  ["runs_per_second", "runs per second"],
  ["burst", "burst"],
  ["tokens_per_minute", "LLM tokens per minute"],
  ["held_streams", "held streams"],
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
    const fromGateway = data.source !== "orchestrator";
    const rows = [];
    for (const [key, label] of FIGURES) {
      const value = data[key];
      const missing = value === null || value === undefined;
      const cell = el("dd", missing ? "muted" : "", missing ? "n/a" : String(value));
      if (missing) cell.title = "the orchestrator did not answer";
      rows.push(el("dt", "", label), cell);
      if (key !== "refused") continue;
      if (fromGateway) cell.title = "refusals this gateway answered (the orchestrator did not answer)";
      for (const [limit, count] of Object.entries(data.refused_by_limit || {})) {
        rows.push(el("dt", "sub", limit), el("dd", "", String(count)));
      }
    }
    if (data.limits) {
      rows.push(el("dt", "", "Limits"), el("dd", "", ""));
      for (const [key, label] of LIMITS) {
        const value = data.limits[key];
        if (key === "burst" && value === null) continue; // the default: one second's worth
        rows.push(el("dt", "sub", label), el("dd", value === null ? "muted" : "", value === null ? "none" : String(value)));
      }
      rows.push(el("dt", "sub", "weight"), el("dd", "", String(data.limits.weight)));
    }
    this.node.replaceChildren(...rows);
    this.node.dataset.tenant = data.tenant;
    this.node.dataset.source = data.source;
  }
}
