// Runs inside the sandbox: boot.py execs `node -e <this file> <ctl_fd>` after applying limits.
// Reads {code, args} (JSON) from stdin, runs the code as a CommonJS module named main.js, calls its
// main with the arguments object (RAGFlow's convention: `module.exports = {main}`, `module.exports = main`,
// or a plain top-level `function main(args)`), awaits it, and writes one JSON line on the control fd.
'use strict';
const fs = require('fs');
const vm = require('vm');
const { createRequire } = require('module');

const CTL = Number(process.argv[process.argv.length - 1]);
const FILE = 'main.js';
const WORKDIR = process.cwd();

function send(record) {
  let data = Buffer.from(JSON.stringify(record) + '\n', 'utf8');
  while (data.length > 0) data = data.subarray(fs.writeSync(CTL, data));
}

function error(kind, message, extra) {
  return Object.assign({ status: 'error', kind, message, line: 0, type: '', traceback: '' }, extra || {});
}

// The stack with the frames of main.js only (the runner's and node's own frames are noise to the user).
function userTrace(err) {
  const stack = err && typeof err.stack === 'string' ? err.stack.split('\n') : [];
  const head = stack.length ? stack[0] : String(err);
  const frames = stack.slice(1).filter((l) => l.includes(FILE + ':'));
  const m = frames.length ? /main\.js:(\d+):\d+/.exec(frames[0]) : null;
  return { text: [head, ...frames].join('\n'), line: m ? Number(m[1]) : 0 };
}

function describe(err) {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  try { return `Uncaught ${JSON.stringify(err)}`; } catch (_) { return `Uncaught ${String(err)}`; }
}

function isMemoryError(err) {
  return err instanceof RangeError && /allocation failed|Invalid (array|string) length|out of memory/i.test(err.message);
}

function finish(record) {
  send(record);
  // Exit now: timers or sockets the code left behind must not keep the sandbox alive after main returned.
  process.exit(record.status === 'ok' ? 0 : 1);
}

function fail(err) {
  const { text, line } = userTrace(err);
  const kind = isMemoryError(err) ? 'memory' : 'exception';
  const type = err instanceof Error ? err.name : typeof err;
  finish(error(kind, describe(err) + (line ? ` (line ${line})` : ''), { line, type, traceback: text }));
}

async function run() {
  const body = JSON.parse(fs.readFileSync(0, 'utf8'));
  let compiled;
  try {
    // The trailer returns a top-level `main` that was defined but not exported; it is on a line of its
    // own after the code, so line numbers in errors are the user's.
    compiled = vm.compileFunction(
      body.code + '\n;return (typeof main === "function") ? main : undefined;',
      ['exports', 'require', 'module', '__filename', '__dirname'],
      { filename: FILE },
    );
  } catch (err) {
    const m = /^main\.js:(\d+)/.exec(String(err && err.stack));
    // An unclosed block is reported on the trailer line: point at the code's last line instead.
    const reported = m ? Number(m[1]) : 0;
    const line = Math.min(reported, body.code.split('\n').length);
    const head = `${err.name}: ${err.message}`;
    const traceback = reported === line ? String(err.stack).split('\n    at ')[0] : head;
    return finish(error('syntax', head + (line ? ` (line ${line})` : ''), { line, type: err.name, traceback }));
  }
  const module = { exports: {} };
  const filename = `${WORKDIR}/${FILE}`;
  let main;
  try {
    const local = compiled.call(module.exports, module.exports, createRequire(filename), module, filename, WORKDIR);
    const exp = module.exports;
    if (typeof exp === 'function') main = exp;
    else if (exp && typeof exp.main === 'function') main = exp.main;
    else main = local;
  } catch (err) {
    return fail(err);
  }
  if (typeof main !== 'function') {
    return finish(error('no_main', 'the code defines no function main(args) (export it: module.exports = { main })'));
  }
  let value;
  try {
    value = await main(body.args);
  } catch (err) {
    return fail(err);
  }
  let valueJson;
  try {
    valueJson = JSON.stringify(value === undefined ? null : value);
    if (valueJson === undefined) throw new TypeError(`a ${typeof value} has no JSON form`);
  } catch (err) {
    return finish(error('bad_return', `main returned a value that is not JSON (${err.message})`));
  }
  return finish({ status: 'ok', value_json: valueJson });
}

process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);
run().catch(fail);
