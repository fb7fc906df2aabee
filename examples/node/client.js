// Trellis over gRPC from Node.js: the contracts in proto/ loaded at run time with @grpc/proto-loader, called
// with @grpc/grpc-js. It creates an agent, streams a run, cancels a run, and rejoins a run with WatchRun after
// dropping its stream.
//
//   cd examples/node && npm ci && node client.js
//
// Environment: TRELLIS_ORCHESTRATOR (host:port, default localhost:50051), TRELLIS_TENANT (default "default"),
// TRELLIS_LLM_ID (the model the agent's LLM uses; empty: the LLM gateway's default), TRELLIS_PROTO_DIR (default
// ../../proto). The orchestrator's gRPC port is internal: it trusts the tenant_id it is given, so keep it
// behind the network policy (k8s/) and give outside callers the HTTP gateway and an API key.

import path from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoDir = process.env.TRELLIS_PROTO_DIR || path.join(here, "..", "..", "proto");
const target = process.env.TRELLIS_ORCHESTRATOR || "localhost:50051";
const tenant = process.env.TRELLIS_TENANT || "default";
const llmId = process.env.TRELLIS_LLM_ID || "";

// keepCase: the field names as in the .proto files (snake_case); oneofs: each event names its `kind`.
const definition = protoLoader.loadSync(
  ["trellis/canvas/v1/agent_service.proto", "trellis/canvas/v1/canvas_service.proto"],
  { includeDirs: [protoDir], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true },
);
const canvasV1 = grpc.loadPackageDefinition(definition).trellis.canvas.v1;
const credentials = grpc.credentials.createInsecure();
const agents = new canvasV1.AgentService(target, credentials);
const canvas = new canvasV1.CanvasService(target, credentials);

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 30_000 }, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

// A canvas: Begin -> LLM -> Message, the answer streamed token by token.
function helloCanvas() {
  const cpn = (name, params, downstream, upstream) => ({ obj: { component_name: name, params }, downstream, upstream });
  return {
    components: {
      begin: cpn("Begin", { prologue: "Hi!", mode: "conversational" }, ["LLM:Answer"], []),
      "LLM:Answer": cpn("LLM", { llm_id: llmId, sys_prompt: "Answer briefly.",
                                 prompts: [{ role: "user", content: "{sys.query}" }] }, ["Message:Reply"], ["begin"]),
      "Message:Reply": cpn("Message", { content: ["{LLM:Answer@content}"] }, [], ["LLM:Answer"]),
    },
  };
}

// Reads a Run or WatchRun stream; `onEvent` may return true to stop reading (the call is then cancelled).
function readRun(call, onEvent = () => false) {
  return new Promise((resolve, reject) => {
    const run = { runId: "", sessionId: "", lastSeq: 0, text: "", finished: null };
    let stopped = false;
    call.on("data", (ev) => {
      if (stopped) return;
      run.runId ||= ev.run_id;
      run.sessionId ||= ev.session_id;
      run.lastSeq = Math.max(run.lastSeq, Number(ev.seq));
      if (ev.kind === "message_delta") run.text += ev.message_delta.content;
      if (ev.kind === "error") console.log(`  error: ${ev.error.message}`);
      if (ev.kind === "run_finished") run.finished = ev.run_finished;
      if (onEvent(ev, run)) {
        stopped = true;
        call.cancel();
        resolve(run);
      }
    });
    call.on("error", (err) => (stopped || err.code === grpc.status.CANCELLED ? resolve(run) : reject(err)));
    call.on("end", () => resolve(run));
  });
}

function status(run) {
  const f = run.finished;
  if (!f) return "stream dropped";
  return f.cancelled ? "cancelled" : f.error ? `failed: ${f.error}` : f.waiting_for_user ? "waiting for user" : "succeeded";
}

async function main() {
  // 1. Create an agent (AgentService.CreateAgent); it runs its draft until a version is published.
  const { agent } = await unary(agents, "CreateAgent", {
    tenant_id: tenant, title: `node-example-${Date.now()}`, description: "made by examples/node/client.js",
    dsl_json: JSON.stringify(helloCanvas()),
  });
  console.log(`created agent ${agent.id}`);
  const runRequest = (query, extra = {}) => ({ agent: { agent_id: agent.id }, tenant_id: tenant, query, ...extra });

  // 2. Stream a run (CanvasService.Run): the answer arrives as message_delta events, then run_finished.
  const first = await readRun(canvas.Run(runRequest("Say hello"), { deadline: Date.now() + 120_000 }), (ev) => {
    if (ev.kind === "message_delta") process.stdout.write(ev.message_delta.content);
    return false;
  });
  process.stdout.write("\n");
  console.log(`run ${first.runId} ${status(first)}: ${JSON.stringify(first.text)}`);

  // 3. Cancel a run (CanvasService.Cancel) once its answer has started; its stream ends with run_finished.cancelled.
  let cancelling = null;
  const cancelled = await readRun(canvas.Run(runRequest("Tell me a long story"), { deadline: Date.now() + 120_000 }),
    (ev, run) => {
      if (ev.kind === "message_delta" && !cancelling) {
        cancelling = unary(canvas, "Cancel", { tenant_id: tenant, run_id: run.runId });
      }
      return false;
    });
  const { cancelled: wasRunning } = await cancelling;
  console.log(`run ${cancelled.runId} ${status(cancelled)} (Cancel found it running: ${wasRunning})`);

  // 4. Drop a run's stream after its first answer token, then rejoin it (CanvasService.WatchRun) after the last
  // event seen: the rest of the answer, to the end. continue_on_disconnect keeps it running meanwhile.
  const dropped = await readRun(
    canvas.Run(runRequest("Tell me a long story", { continue_on_disconnect: true }), { deadline: Date.now() + 120_000 }),
    (ev) => ev.kind === "message_delta");
  console.log(`run ${dropped.runId} stream dropped after event ${dropped.lastSeq}: ${JSON.stringify(dropped.text)}`);
  const rest = await readRun(canvas.WatchRun({ tenant_id: tenant, run_id: dropped.runId, after_seq: dropped.lastSeq },
                                             { deadline: Date.now() + 120_000 }));
  console.log(`rejoined run ${dropped.runId} ${status(rest)}: ${JSON.stringify(dropped.text + rest.text)}`);

  const ok = status(first) === "succeeded" && status(cancelled) === "cancelled" && status(rest) === "succeeded";
  agents.close();
  canvas.close();
  process.exitCode = ok ? 0 : 1;
}

main().catch((err) => {
  console.error(`failed: ${err.message}`);
  process.exitCode = 1;
});
