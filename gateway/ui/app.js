// The run viewer: sign in, pick an agent and a version, chat with it while its components light up, and
// open the past runs of its sessions. Everything goes through the gateway's public APIs (api.js).

import { Admission } from "./admission.js";
import { Api, ApiError } from "./api.js";
import { el, formatSeconds } from "./dom.js";
import { Graph } from "./graph.js";
import { Trace } from "./trace.js";

const KEY_STORE = "trellis.viewer.key";
const $ = (id) => document.getElementById(id);

const state = {
  api: null,
  agents: [], // this key's agents, as listed
  agent: null, // {id, title}
  sessions: [], // the agent's sessions, as listed
  runAgents: new Map(), // run id -> agent id of the past runs opened, for the links between caller and child
  versionId: "", // "" = latest published (or the draft when none is); "draft" = the draft
  threadId: "", // the session the next message continues
  running: null, // AbortController of the run in flight
};

const graph = new Graph($("graph"));
const trace = new Trace($("trace"), $("trace-title"));
const admission = new Admission($("admission"));
window.addEventListener("resize", () => graph.fit());

function status(text, cls = "") {
  const pill = $("run-status");
  pill.textContent = text;
  pill.className = `pill ${cls}`;
}

// ---------------------------------------------------------------------------------------------- sign-in
async function signIn(key) {
  const api = new Api(key);
  await api.agents(); // a wrong key fails here, with the gateway's message
  state.api = api;
  localStorage.setItem(KEY_STORE, key);
  $("sign-in").hidden = true;
  $("viewer").hidden = false;
  $("sign-out").hidden = false;
  $("who").textContent = `key …${key.slice(-4)}`;
  await Promise.all([loadAgents(), admission.refresh(api)]);
}

function signOut() {
  localStorage.removeItem(KEY_STORE);
  state.running?.abort();
  Object.assign(state, { api: null, agent: null, threadId: "", running: null });
  $("viewer").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  $("sign-in").hidden = false;
}

$("sign-in-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  $("sign-in-error").textContent = "";
  try {
    await signIn($("api-key").value.trim());
  } catch (err) {
    $("sign-in-error").textContent = err instanceof ApiError ? err.message : `Cannot reach the gateway: ${err.message}`;
  }
});
$("sign-out").addEventListener("click", signOut);

// ---------------------------------------------------------------------------------------------- agents
async function loadAgents() {
  const list = $("agents");
  list.replaceChildren();
  const agents = (state.agents = await state.api.agents());
  if (!agents.length) list.append(el("li", "muted", "No agents yet: create one with POST /api/v1/agents."));
  for (const a of agents) {
    const li = el("li");
    const b = el("button", "item", a.title);
    b.dataset.agentId = a.id;
    b.addEventListener("click", () => openAgent(a));
    li.append(b);
    list.append(li);
  }
  if (agents.length && !state.agent) await openAgent(agents[0]);
}

// While a canvas loads, the chat form waits: a run started meanwhile would be marked on the graph that the
// loading canvas then draws over. Counted, so that a second click while the first loads keeps it waiting.
let loadingCanvases = 0;
async function opening(load) {
  const parts = [$("query"), $("send")];
  loadingCanvases += 1;
  for (const p of parts) p.disabled = true;
  try {
    await load();
  } finally {
    loadingCanvases -= 1;
    if (!loadingCanvases) for (const p of parts) p.disabled = false;
  }
}

async function openAgent(agent) {
  await opening(() => showAgent(agent));
}

async function showAgent(agent) {
  state.running?.abort();
  state.agent = agent;
  state.threadId = "";
  for (const b of $("agents").querySelectorAll("button")) b.classList.toggle("selected", b.dataset.agentId === agent.id);
  $("agent-title").textContent = agent.title;
  $("messages").replaceChildren();
  trace.clear();
  status("");
  const versions = await state.api.versions(agent.id);
  const select = $("versions");
  select.replaceChildren(new Option(versions.length ? "Latest published" : "Draft (no versions)", ""));
  if (versions.length) select.append(new Option("Draft", "draft"));
  for (const v of versions) {
    const label = `v${v.number}`;
    select.append(new Option(v.title && v.title !== label ? `${label} · ${v.title}` : label, v.id));
  }
  state.versionId = "";
  await showVersion();
  await loadSessions();
}

async function showVersion() {
  const id = state.agent.id;
  const v = state.versionId;
  let dsl;
  if (v && v !== "draft") dsl = (await state.api.version(id, v)).dsl;
  else if (!v && state.agent.latest_version_id) dsl = (await state.api.version(id, state.agent.latest_version_id)).dsl;
  else dsl = (await state.api.agent(id)).dsl;
  graph.draw(dsl);
}

$("versions").addEventListener("change", async (e) => {
  state.versionId = e.target.value;
  state.threadId = ""; // a session runs its own version: a new version means a new chat
  $("messages").replaceChildren();
  await opening(showVersion);
});

// ---------------------------------------------------------------------------------------------- sessions
async function loadSessions() {
  const list = $("sessions");
  list.replaceChildren();
  const sessions = (state.sessions = await state.api.sessions(state.agent.id));
  if (!sessions.length) list.append(el("li", "muted", "No sessions yet."));
  for (const s of sessions) {
    const asked = s.messages.filter((m) => m.role === "user").length;
    const first = s.messages.find((m) => m.role === "user")?.content || s.name || s.id;
    const b = el("button", "item", first.slice(0, 60));
    b.dataset.sessionId = s.id;
    b.append(el("small", "muted", ` ${asked} turn${asked === 1 ? "" : "s"}`));
    b.addEventListener("click", () => openSession(s));
    const li = el("li");
    li.append(b);
    list.append(li);
  }
}

function openSession(session) {
  state.running?.abort();
  state.threadId = session.id;
  for (const b of $("sessions").querySelectorAll("button")) b.classList.toggle("selected", b.dataset.sessionId === session.id);
  const box = $("messages");
  box.replaceChildren();
  for (const m of session.messages) {
    const bubble = message(m.role, m.content);
    if (m.role === "assistant" && m.id) {
      const open = el("button", "link trace-link", "show run trace");
      open.dataset.messageId = m.id;
      open.addEventListener("click", () => replay(m.id));
      bubble.append(open);
    }
  }
  graph.reset();
  trace.clear(`session ${session.id.slice(0, 8)}`);
  status("");
}

// A past run: its stored event stream replayed onto the canvas and the trace (every component with its
// time, tool calls, references, errors), then the Agent thoughts of its run log. When the stream is gone
// (kept 7 days, like the log) the run log alone marks the components it names.
async function replay(messageId) {
  state.running?.abort();
  graph.reset();
  trace.clear(`run ${messageId.slice(0, 8)}`);
  const agentId = state.agent.id;
  state.runAgents.set(messageId, agentId);
  let replayed = false;
  let calls = false; // an AgentCall node ran: it started a child run
  try {
    await state.api.stream(agentId, {}, (env) => {
      replayed = true;
      calls ||= env.data?.component_type === "AgentCall";
      trace.envelope(env);
      markNode(env);
    }, undefined, `${messageId}:0`);
  } catch (err) {
    replayed = false;
    graph.reset();
    trace.clear(`run ${messageId.slice(0, 8)}`);
  }
  try {
    const log = await state.api.runLog(state.agent.id, messageId);
    const seen = replayed ? trace.thoughts(log) : trace.replay(log);
    if (!replayed) for (const [component, failed] of seen) graph.mark(component, failed ? "failed" : "visited");
    const ok = log.status === "succeeded" || log.status === "done";
    status(log.status, ok ? "ok" : log.status === "failed" ? "bad" : "");
  } catch (err) {
    trace.line("fail", "", err.message);
  }
  await runLinks(agentId, messageId, calls);
}

// Agents calling agents (docs/agents-as-services.md): "open child run" on each AgentCall node that started one,
// and "open caller run" when an AgentCall of another run started this one (its record's `caller_run_id`).
async function runLinks(agentId, runId, calls) {
  const shown = trace.shown;
  try {
    const children = calls ? await state.api.childRuns(agentId, runId) : [];
    const record = await state.api.run(agentId, runId);
    if (trace.shown !== shown) return; // another trace is shown by now
    for (const c of children) {
      trace.button(trace.lastLine(c.component), "open child run", () => openRun(c.agentId, c.runId));
    }
    if (record.caller_run_id) {
      const li = trace.line("run", "", `called by run ${record.caller_run_id.slice(0, 8)}`);
      trace.button(li, "open caller run", async () => openRun(await agentOfRun(record.caller_run_id), record.caller_run_id));
    }
  } catch (err) {
    if (trace.shown === shown) trace.line("fail", "", err.message);
  }
}

// A past run of any agent of this key, opened as from its session list: its agent, its session, its trace.
async function openRun(agentId, runId) {
  const agent = state.agents.find((a) => a.id === agentId);
  if (!agent) {
    trace.line("fail", "", `run ${runId.slice(0, 8)}: its agent is not one of this key's`);
    return;
  }
  const record = await state.api.run(agentId, runId);
  await openAgent(agent);
  const session = state.sessions.find((s) => s.id === record.session_id);
  if (session) openSession(session);
  await replay(runId);
}

// The agent of a run: known when the run was opened here, else the first agent of this key whose run it is
// (the run API names a run under its agent).
async function agentOfRun(runId) {
  if (state.runAgents.has(runId)) return state.runAgents.get(runId);
  for (const a of state.agents) {
    try {
      await state.api.run(a.id, runId);
      return a.id;
    } catch { /* another agent's run */ }
  }
  return "";
}

// A component's state on the canvas, from one envelope (live or replayed).
function markNode(env) {
  const d = env.data || {};
  if (env.type === "status") {
    if (d.status === "node_started") graph.mark(env.node_name, "running");
    else if (d.status === "node_finished") graph.mark(env.node_name, "done", d.elapsed_time);
    else if (d.status === "node_failed") graph.mark(env.node_name, "failed", d.elapsed_time);
    else if (d.status === "node_skipped") graph.mark(env.node_name, "skipped");
  } else if (env.type === "error" && d.component_id) {
    graph.mark(d.component_id, "failed");
  }
}

$("new-chat").addEventListener("click", () => {
  state.running?.abort();
  state.threadId = "";
  $("messages").replaceChildren();
  for (const b of $("sessions").querySelectorAll("button")) b.classList.remove("selected");
  graph.reset();
  trace.clear();
  status("");
});

// ---------------------------------------------------------------------------------------------- chat
function message(role, text) {
  const bubble = el("div", `msg ${role}`);
  const body = el("div", "msg-body");
  renderText(body, text || "");
  bubble.append(body);
  $("messages").append(bubble);
  bubble.scrollIntoView({ block: "end" });
  return bubble;
}

// Text with <think>...</think> blocks shown apart from the answer.
function renderText(body, text) {
  body.replaceChildren();
  const parts = text.split(/(<think>|<\/think>)/);
  let thinking = false;
  for (const p of parts) {
    if (p === "<think>") thinking = true;
    else if (p === "</think>") thinking = false;
    else if (p) body.append(el("span", thinking ? "think" : "", p));
  }
}

$("chat-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const query = $("query").value.trim();
  if (!query || !state.agent) return;
  $("query").value = "";
  await run(query);
});

// The form a UserFillUp asks for (its fields: {name, type, optional, options}); submitting it resumes the run.
function inputForm(fields, tips) {
  const form = el("form", "fill-up");
  if (tips) form.append(el("p", "tips", tips));
  for (const [key, spec] of Object.entries(fields)) {
    const label = el("label", "", `${spec.name || key}${spec.optional ? "" : " *"}`);
    const options = Array.isArray(spec.options) ? spec.options : [];
    const input = options.length ? el("select") : el(spec.type === "paragraph" ? "textarea" : "input");
    for (const o of options) input.append(Object.assign(el("option", "", String(o)), { value: String(o) }));
    input.name = key;
    input.required = !spec.optional;
    label.append(input);
    form.append(label);
  }
  const send = el("button", "", "Answer");
  send.type = "submit";
  form.append(send);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const inputs = Object.fromEntries([...new FormData(form)].map(([k, v]) => [k, { value: v }]));
    form.querySelectorAll("input, select, textarea, button").forEach((x) => { x.disabled = true; });
    await run("", inputs);
  });
  return form;
}

async function run(query, inputs = null) {
  state.running?.abort();
  const controller = (state.running = new AbortController());
  message("user", inputs ? Object.entries(inputs).map(([k, v]) => `${k}: ${v.value}`).join("\n") : query);
  const answer = message("assistant", "");
  answer.classList.add("streaming");
  const body = answer.querySelector(".msg-body");
  let text = "";
  graph.reset();
  trace.clear("live");
  status("running", "live");
  $("send").hidden = true;
  $("stop").hidden = false;
  const request = inputs ? { inputs } : { query };
  if (state.threadId) request.thread_id = state.threadId;
  else if (state.versionId === "draft") request.draft = true;
  else if (state.versionId) request.version_id = state.versionId;
  let failed = "";
  let runId = "";
  try {
    await state.api.stream(state.agent.id, request, (env) => {
      if (controller.signal.aborted) return;
      trace.envelope(env);
      markNode(env);
      const d = env.data || {};
      if (env.type === "thread_id") state.threadId = d.thread_id;
      runId = env.run_id || runId;
      if (env.type === "content") {
        text += d.delta;
        renderText(body, text);
      } else if (env.type === "status" && d.status === "message_end") {
        citeReferences(answer, d.reference);
      } else if (env.type === "status" && d.status === "user_input_required") {
        answer.append(inputForm(d.inputs || {}, d.tips || ""));
      } else if (env.type === "error") {
        failed = d.message;
        answer.append(el("p", "error", failed));
      } else if (env.type === "done") {
        status(failed ? "failed" : d.cancelled ? "cancelled" : d.waiting_for_user ? "waiting for your answer"
          : `done in ${formatSeconds(d.elapsed_time)}`, failed ? "bad" : "ok");
      }
    }, controller.signal);
  } catch (err) {
    if (err.name !== "AbortError") {
      answer.append(el("p", "error", err.message));
      status(err.retryAfter !== undefined ? "refused" : "failed", "bad");
    } else if (controller.byUser) {
      // Closing the stream cancels the run in the orchestrator (gateway/README.md, Streams).
      graph.settle();
      trace.line("run", "", "stopped");
      status("stopped");
    }
  } finally {
    answer.classList.remove("streaming");
    if (state.running === controller) state.running = null;
    $("send").hidden = false;
    $("stop").hidden = true;
  }
  if (runId) answer.dataset.runId = runId;
  if (!controller.signal.aborted || controller.byUser) await Promise.all([loadSessions(), admission.refresh(state.api)]);
}

$("stop").addEventListener("click", () => {
  if (!state.running) return;
  state.running.byUser = true;
  state.running.abort();
});

function citeReferences(bubble, reference) {
  const chunks = Object.values(reference?.chunks || {});
  if (!chunks.length) return;
  const refs = el("details", "refs");
  refs.append(el("summary", "", `${chunks.length} reference${chunks.length > 1 ? "s" : ""}`));
  const list = el("ol");
  for (const c of chunks) {
    const li = el("li");
    li.append(el("strong", "", c.document_name || c.doc_name || "document"), el("span", "", ` ${(c.content || "").slice(0, 240)}`));
    list.append(li);
  }
  refs.append(list);
  bubble.append(refs);
}

// ---------------------------------------------------------------------------------------------- start
const saved = localStorage.getItem(KEY_STORE);
if (saved) {
  signIn(saved).catch(() => {
    localStorage.removeItem(KEY_STORE);
    $("sign-in").hidden = false;
  });
} else {
  $("sign-in").hidden = false;
}
