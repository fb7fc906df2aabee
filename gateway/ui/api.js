// The gateway's public HTTP APIs as the viewer uses them: RAGFlow-style JSON ({code, message, data})
// and the standard envelope stream (server-sent events over a POST, read with fetch).

export class ApiError extends Error {
  // `retryAfter`: seconds, when the gateway refused the request for a limit (HTTP 429)
  constructor(message, retryAfter = undefined) {
    super(message);
    this.retryAfter = retryAfter;
  }
}

// A listing's items: RAGFlow answers a bare list on some versions and {canvas | sessions | ...: [...], total}
// on others.
function items(data) {
  if (Array.isArray(data)) return data;
  return Object.values(data || {}).find(Array.isArray) || [];
}

export class Api {
  constructor(key) {
    this.key = key;
  }

  headers(json = false) {
    const h = { Authorization: `Bearer ${this.key}` };
    if (json) h["Content-Type"] = "application/json";
    return h;
  }

  // A RAGFlow-dialect call: `data` on code 0, else an ApiError carrying the server's message.
  async call(method, path, body) {
    const resp = await fetch(path, {
      method,
      headers: this.headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let payload;
    try {
      payload = await resp.json();
    } catch {
      throw new ApiError(`${method} ${path}: HTTP ${resp.status}`);
    }
    // A refused key: HTTP 401 (code 401), or code 102 with HTTP 200 as older RAGFlow servers answer.
    if (resp.status === 401 || payload.code === 401 || payload.code === 102) {
      throw new ApiError("This API key was refused by the gateway.");
    }
    if (payload.code !== 0) throw new ApiError(payload.message || `${method} ${path} failed`);
    return payload.data;
  }

  // The tenant's admission figures: {tenant, source, admitted, refused, refused_by_limit, running, waiting,
  // tokens, tokens_last_minute, limits, replicas} (routes/ui.py's AdmissionOut).
  admission() {
    return this.call("GET", "/api/v1/tenant/admission");
  }

  async agents() {
    return items(await this.call("GET", "/api/v1/agents?dsl=false&page_size=100"));
  }

  async agent(id) {
    return this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}`);
  }

  async versions(id) {
    return items(await this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}/versions`));
  }

  version(id, versionId) {
    return this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}/versions/${encodeURIComponent(versionId)}`);
  }

  async sessions(id) {
    return items(await this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}/sessions?page_size=30`));
  }

  runLog(id, messageId) {
    return this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}/logs/${encodeURIComponent(messageId)}`);
  }

  // A run's record (status, `caller_run_id` of a child run...); an ApiError when it is not this agent's.
  run(id, runId) {
    return this.call("GET", `/api/v1/agents/${encodeURIComponent(id)}/runs/${encodeURIComponent(runId)}`);
  }

  // The child runs a past run's AgentCall nodes started, [{component, agentId, runId}], from the run's stored
  // stream in RAGFlow's dialect, whose node_finished carries a component's inputs and outputs (the envelope's
  // does not). An AgentCall used as an Agent's tool keeps no outputs: its child is not listed.
  async childRuns(id, runId) {
    const resp = await fetch(`/api/v1/agents/${encodeURIComponent(id)}/runs/${encodeURIComponent(runId)}/events?dialect=ragflow`,
      { headers: this.headers() });
    if (!resp.ok) throw new ApiError(`the run's events: HTTP ${resp.status}`);
    const children = [];
    await readEvents(resp, (data) => {
      if (data === "[DONE]") return;
      const ev = JSON.parse(data);
      const d = ev.data || {};
      if (ev.event === "node_finished" && d.component_type === "AgentCall" && d.outputs?.run_id) {
        children.push({ component: d.component_id, agentId: d.inputs?.agent_id, runId: d.outputs.run_id });
      }
    });
    return children;
  }

  // POST /api/v1/agents/{id}/stream; calls onEnvelope(envelope) for each event until `done`. With
  // `lastEventId` ("<run id>:<seq>") it rejoins that run after that event instead of starting one: "<run id>:0"
  // replays a past run's whole stored stream.
  async stream(id, body, onEnvelope, signal, lastEventId = "") {
    const headers = this.headers(true);
    if (lastEventId) headers["Last-Event-ID"] = lastEventId;
    const resp = await fetch(`/api/v1/agents/${encodeURIComponent(id)}/stream`, {
      method: "POST", headers, body: JSON.stringify(body), signal,
    });
    if (!resp.ok || !(resp.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      // Refused before the stream: one error envelope in the body.
      let message = `HTTP ${resp.status}`;
      let retryAfter;
      try {
        const env = await resp.json();
        message = env.data?.message || message;
        // Refused for a limit (HTTP 429): say when to try again (Retry-After, in the envelope too).
        retryAfter = env.data?.retry_after;
        if (retryAfter !== undefined) message += ` (try again in ${retryAfter} s)`;
      } catch { /* not JSON: keep the status */ }
      throw new ApiError(message, retryAfter);
    }
    await readEvents(resp, (data) => onEnvelope(JSON.parse(data)));
  }
}

// Server-sent events from a fetch response: onData(the data of each event) until the stream ends.
async function readEvents(resp, onData) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onData(data);
    }
  }
}
