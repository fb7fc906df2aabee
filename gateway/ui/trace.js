// The run trace panel: one line per component start/finish, tool call, reference and error, live from the
// envelope stream or replayed from a stored run log (GET /api/v1/agents/{id}/logs/{message_id}).

import { el, formatSeconds } from "./dom.js";

function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

function details(summary, body) {
  const d = el("details");
  d.append(el("summary", "", summary), el("pre", "", body));
  return d;
}

export class Trace {
  constructor(list, title) {
    this.list = list;
    this.title = title;
    this.tools = {};
    this.shown = 0; // bumped by clear(): what a slow request adds goes only to the trace it was made for
  }

  clear(title = "") {
    this.list.replaceChildren();
    this.title.textContent = title;
    this.tools = {};
    this.shown += 1;
  }

  line(cls, node, text) {
    const li = el("li", `t-${cls}`);
    if (node) li.append(el("code", "t-node", node));
    li.append(el("span", "t-text", text));
    this.list.append(li);
    this.list.scrollTop = this.list.scrollHeight;
    return li;
  }

  // The last line of component `node`, or a new one when the trace has none (its stream is no longer stored).
  lastLine(node) {
    const lines = [...this.list.querySelectorAll("li")].filter((li) => li.querySelector(".t-node")?.textContent === node);
    return lines.pop() || this.line("done", node, "");
  }

  // A link at the end of a line: "open child run", "open caller run".
  button(li, text, onClick) {
    const b = el("button", "link t-link", text);
    b.addEventListener("click", onClick);
    li.append(" ", b);
    return b;
  }

  // One envelope of the live stream.
  envelope(env) {
    const d = env.data || {};
    const node = env.node_name === "system" ? "" : env.node_name;
    if (env.type === "status") {
      const s = d.status;
      if (s === "run_started") this.line("run", "", "run started");
      else if (s === "node_started") this.line("start", node, `${d.component_type} started`);
      else if (s === "node_finished") this.line("done", node, `finished in ${formatSeconds(d.elapsed_time)}`);
      else if (s === "node_skipped") this.line("skip", node, "skipped (branch not taken)");
      else if (s === "node_failed") this.line("fail", node, `failed after ${formatSeconds(d.elapsed_time)}: ${d.error}`);
      else if (s === "message_end") this.references(node, d.reference);
      else if (s === "user_input_required") this.line("wait", node, `waits for input: ${d.tips || ""}`);
    } else if (env.type === "tool_start") {
      const li = this.line("tool", node, `tool ${d.tool_name} running`);
      li.append(details("input", pretty(d.tool_input)));
      this.tools[d.call_id] = li;
    } else if (env.type === "tool_end") {
      const li = this.tools[d.call_id] || this.line("tool", node, "");
      li.querySelector(".t-text").textContent = `tool ${d.tool_name} ${d.error ? "failed" : "returned"} in ${formatSeconds(d.elapsed_time)}`;
      if (d.error) li.classList.add("t-fail");
      li.append(details(d.error ? "error" : "output", pretty(d.error || d.tool_output)));
    } else if (env.type === "error") {
      this.line("fail", d.component_id || "", `run failed: ${d.message}`);
    } else if (env.type === "done") {
      const usage = d.usage?.total_tokens ? `, ${d.usage.total_tokens} tokens` : "";
      const how = d.cancelled ? "cancelled" : "done";
      this.line("run", "", `${how}${d.elapsed_time != null ? ` in ${formatSeconds(d.elapsed_time)}` : ""}${usage}`);
    }
  }

  references(node, reference) {
    const chunks = Object.values(reference?.chunks || {});
    if (!chunks.length) return;
    const li = this.line("ref", node, `${chunks.length} reference${chunks.length > 1 ? "s" : ""}`);
    li.append(details("chunks", chunks.map((c) => `[${c.document_name || c.doc_name || "?"}] ${c.content || ""}`).join("\n\n")));
  }

  // A stored run: status, then tool calls and Agent thoughts in time order. Returns the component ids seen.
  replay(log) {
    const seen = new Map(); // component id -> failed?
    const took = log.finished_at && log.started_at ? ` in ${formatSeconds(log.finished_at - log.started_at)}` : "";
    this.line("run", "", `run ${log.status}${took}`);
    for (const call of log.logs || []) {
      const li = this.line(call.error ? "fail" : "tool", call.component_id,
        `tool ${call.tool_name} ${call.error ? "failed" : "returned"} in ${formatSeconds(call.elapsed_time)}`);
      li.append(details("input", pretty(call.arguments ?? {})));
      li.append(details(call.error ? "error" : "output", pretty(call.error || call.result || "")));
      seen.set(call.component_id, seen.get(call.component_id) || Boolean(call.error));
    }
    for (const [component, failed] of this.thoughts(log)) seen.set(component, seen.get(component) || failed);
    if (log.error) this.line("fail", "", `error: ${log.error}`);
    return seen;
  }

  // The Agent reasoning steps of a stored run. Returns component id -> failed?.
  thoughts(log) {
    const seen = new Map();
    for (const t of log.thoughts || []) {
      const what = t.tool ? `round ${t.round ?? ""}: called ${t.tool}` : `round ${t.round ?? ""}: ${t.thought || "answered"}`;
      const li = this.line(t.error ? "fail" : "thought", t.component_id, what);
      if (t.thought && t.tool) li.append(details("thought", t.thought));
      if (t.observation) li.append(details("observation", pretty(t.observation)));
      seen.set(t.component_id, seen.get(t.component_id) || Boolean(t.error));
    }
    return seen;
  }
}
