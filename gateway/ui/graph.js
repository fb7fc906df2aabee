// A canvas DSL drawn as a graph: components as boxes, downstream edges as arrows, the children of an
// Iteration or Loop nested inside its box, an Agent's tools as chips inside the Agent. Both DSL shapes
// are read: RAGFlow's v1 ({components: {id: {obj: {component_name, params}, downstream, parent_id}}})
// and Trellis v2 ({version: 2, components: {id: {name, params, downstream, parent_id}}}), also inside a
// template wrapper ({dsl: {...}}). Layout is computed (layers by longest path), not read from the
// editor's saved positions, so canvases made through the API draw the same way.

import { el, formatSeconds } from "./dom.js";

const NODE_W = 168;
const NODE_H = 54;
const GAP_X = 46;
const GAP_Y = 18;
const PAD = 14;
const HEAD = 26;
const SVG_NS = "http://www.w3.org/2000/svg";
const HIDDEN = new Set(["Note"]); // editor annotations, never run

export function parseCanvas(dsl) {
  const canvas = dsl && !dsl.components && dsl.dsl ? dsl.dsl : dsl || {};
  const names = {};
  for (const node of canvas.graph?.nodes || []) {
    if (node?.id && node.data?.name) names[node.id] = node.data.name;
  }
  const components = {};
  for (const [id, raw] of Object.entries(canvas.components || {})) {
    const type = raw.obj?.component_name || raw.name || id.split(":")[0];
    if (HIDDEN.has(type)) continue;
    const params = raw.obj?.params || raw.params || {};
    components[id] = {
      id, type, params,
      name: names[id] || id,
      downstream: (raw.downstream || []).filter((d) => typeof d === "string"),
      parent: raw.parent_id || raw.parentId || null,
      tools: (params.tools || []).map((t) => t.name || t.component_name).filter(Boolean),
      children: [],
    };
  }
  for (const c of Object.values(components)) {
    c.downstream = c.downstream.filter((d) => components[d]);
    if (c.parent && components[c.parent]) components[c.parent].children.push(c.id);
    else c.parent = null;
  }
  return components;
}

// Columns by longest path from the scope's roots; members of a cycle go after everything placed.
function layers(ids, components) {
  const inScope = new Set(ids);
  const indegree = Object.fromEntries(ids.map((id) => [id, 0]));
  for (const id of ids) for (const d of components[id].downstream) if (inScope.has(d)) indegree[d] += 1;
  const depth = Object.fromEntries(ids.map((id) => [id, 0]));
  const queue = ids.filter((id) => indegree[id] === 0);
  const placed = new Set();
  while (queue.length) {
    const id = queue.shift();
    placed.add(id);
    for (const d of components[id].downstream) {
      if (!inScope.has(d)) continue;
      depth[d] = Math.max(depth[d], depth[id] + 1);
      if (--indegree[d] === 0) queue.push(d);
    }
  }
  let next = Math.max(0, ...Object.values(depth)) + 1;
  for (const id of ids) if (!placed.has(id)) depth[id] = next++;
  const columns = [];
  for (const id of ids) (columns[depth[id]] ||= []).push(id);
  return columns.filter(Boolean);
}

// Sizes every box (a container's from its children) and places children relative to their parent.
function layoutScope(ids, components, boxes) {
  for (const id of ids) {
    const c = components[id];
    if (c.children.length) {
      const inner = layoutScope(c.children, components, boxes);
      boxes[id] = { w: Math.max(NODE_W, inner.w + 2 * PAD), h: inner.h + 2 * PAD + HEAD, container: true };
    } else {
      boxes[id] = { w: NODE_W, h: NODE_H + (c.tools.length ? 22 : 0) };
    }
  }
  const columns = layers(ids, components);
  const heights = columns.map((col) => col.reduce((s, id) => s + boxes[id].h, 0) + GAP_Y * (col.length - 1));
  const height = Math.max(0, ...heights);
  let x = 0;
  columns.forEach((col, i) => {
    const width = Math.max(...col.map((id) => boxes[id].w));
    let y = (height - heights[i]) / 2;
    for (const id of col) {
      boxes[id].x = x + (width - boxes[id].w) / 2;
      boxes[id].y = y;
      y += boxes[id].h + GAP_Y;
    }
    x += width + GAP_X;
  });
  return { w: Math.max(0, x - GAP_X), h: height };
}

function absolute(id, components, boxes) {
  let { x, y } = boxes[id];
  for (let p = components[id].parent; p; p = components[p].parent) {
    x += boxes[p].x + PAD;
    y += boxes[p].y + PAD + HEAD;
  }
  return { x, y, w: boxes[id].w, h: boxes[id].h };
}

export class Graph {
  constructor(host) {
    this.host = host;
    this.nodes = {};
    this.components = {};
  }

  draw(dsl) {
    this.components = parseCanvas(dsl);
    this.nodes = {};
    this.host.replaceChildren();
    const top = Object.values(this.components).filter((c) => !c.parent).map((c) => c.id);
    if (!top.length) {
      this.host.append(el("p", "muted", "This canvas has no components."));
      return;
    }
    const boxes = {};
    const size = layoutScope(top, this.components, boxes);
    const stage = el("div", "stage");
    stage.style.width = `${size.w + 2 * PAD}px`;
    stage.style.height = `${size.h + 2 * PAD}px`;
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("width", size.w + 2 * PAD);
    svg.setAttribute("height", size.h + 2 * PAD);
    svg.innerHTML = '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="currentColor"/></marker></defs>';
    stage.append(svg);
    // Containers first, so their children sit on top of them.
    const depth = (id) => (this.components[id].parent ? 1 + depth(this.components[id].parent) : 0);
    const rank = (id) => (boxes[id].container ? depth(id) : 1000);
    const order = Object.keys(boxes).sort((a, b) => rank(a) - rank(b));
    const abs = {};
    for (const id of order) {
      const c = this.components[id];
      const at = (abs[id] = absolute(id, this.components, boxes));
      const node = el("div", `node${boxes[id].container ? " container" : ""}`);
      node.dataset.id = id;
      node.dataset.type = c.type;
      node.style.left = `${at.x + PAD}px`;
      node.style.top = `${at.y + PAD}px`;
      node.style.width = `${at.w}px`;
      node.style.height = `${at.h}px`;
      node.title = `${c.type} ${id}`;
      const head = el("div", "node-head");
      head.append(el("span", "node-type", c.type), el("span", "node-time"));
      node.append(head, el("div", "node-name", c.name));
      if (c.tools.length) {
        const tools = el("div", "node-tools");
        for (const t of c.tools) tools.append(el("span", "chip", t));
        node.append(tools);
      }
      stage.append(node);
      this.nodes[id] = node;
    }
    // Edges meet a box at its middle; a container's at the middle of its title row.
    const anchor = (id) => (boxes[id].container ? HEAD / 2 + 4 : boxes[id].h / 2);
    for (const c of Object.values(this.components)) {
      for (const d of c.downstream) {
        const a = abs[c.id];
        const b = abs[d];
        const x1 = a.x + a.w + PAD;
        const y1 = a.y + anchor(c.id) + PAD;
        const x2 = b.x + PAD;
        const y2 = b.y + anchor(d) + PAD;
        const path = document.createElementNS(SVG_NS, "path");
        const bend = Math.max(24, Math.abs(x2 - x1) / 2);
        const back = x2 <= x1; // a loop back to an earlier column
        path.setAttribute("d", back
          ? `M${x1},${y1} C${x1 + 40},${y1 - 60} ${x2 - 40},${y2 - 60} ${x2},${y2}`
          : `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}`);
        path.setAttribute("marker-end", "url(#arrow)");
        path.dataset.from = c.id;
        path.dataset.to = d;
        svg.append(path);
      }
    }
    this.host.append(stage);
    this.stage = stage;
    this.width = size.w + 2 * PAD;
    this.fit();
  }

  // Shrink a canvas wider than its panel (a phone) so all of it shows; never enlarge it.
  fit() {
    if (!this.stage) return;
    const room = this.host.clientWidth - 4;
    this.stage.style.zoom = room > 0 && room < this.width ? String(Math.max(0.45, room / this.width)) : "";
  }

  reset() {
    for (const node of Object.values(this.nodes)) {
      node.classList.remove("running", "done", "failed", "skipped", "visited");
      node.querySelector(".node-time").textContent = "";
      delete node.dataset.runs;
    }
  }

  // A stopped run: nothing is running any more.
  settle() {
    for (const node of Object.values(this.nodes)) node.classList.remove("running");
  }

  // status: "running" | "done" | "failed" | "skipped" | "visited" (seen in a stored trace)
  mark(id, status, elapsed) {
    const node = this.nodes[id];
    if (!node) return;
    node.classList.remove("running", "done", "failed", "skipped", "visited");
    node.classList.add(status);
    const time = node.querySelector(".node-time");
    if (status === "running") {
      node.dataset.runs = String(Number(node.dataset.runs || 0) + 1);
    }
    if (typeof elapsed === "number") {
      const runs = Number(node.dataset.runs || 1);
      time.textContent = `${formatSeconds(elapsed)}${runs > 1 ? ` ×${runs}` : ""}`;
    }
  }
}
