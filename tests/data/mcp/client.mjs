// A real MCP client (the TypeScript SDK's Client and StdioClientTransport, from npm's
// @modelcontextprotocol/sdk) for tests/mcp.rs; the second client beside client.py.
//
// Usage: node client.mjs NODE_MODULES STEPS_JSON -- SERVER_COMMAND [ARG...]
//
// NODE_MODULES is the folder the SDK was installed into (it is imported from there by path, as
// the tests run from the repository). STEPS_JSON is a list of steps, each one of
//   {"tools": true}                                 tools/list
//   {"call": NAME, "arguments": {...}}              tools/call
//   {"read": URI}                                   resources/read
//   {"cancel_wait": {...wait arguments}, "during": [STEPS]}
//       a `wait` call with progress and an AbortSignal; once it has reported progress twice,
//       the `during` steps run (a ping, other tools) while it still waits, then the wait is
//       aborted (the SDK sends notifications/cancelled)
//   {"burst": N, "call": NAME, "arguments": {...}}  N calls at once (after "after_ms" ms)
// The script starts the server, initializes, runs the steps in order and prints one JSON
// document: the negotiated protocol version, the server's name, and each step's answer.

import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [modules, stepsJson, dashes, command, ...args] = process.argv.slice(2);
if (dashes !== "--") throw new Error("usage: client.mjs NODE_MODULES STEPS_JSON -- COMMAND [ARG...]");
const sdk = (path) => import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);
const { Client } = await sdk("client/index.js");
const { StdioClientTransport } = await sdk("client/stdio.js");

const textOf = (content) => (content ?? []).map((item) => item.text ?? "").join("");

const answer = (result) => ({
  isError: Boolean(result.isError),
  text: textOf(result.content),
  structured: result.structuredContent ?? null,
});

async function call(client, name, args, options) {
  try {
    return answer(await client.callTool({ name, arguments: args }, undefined, options));
  } catch (error) {
    return { error: String(error?.message ?? error), code: error?.code ?? null };
  }
}

async function step(client, spec) {
  if (spec.tools) {
    const listed = await client.listTools();
    return { tools: listed.tools.map((t) => ({ name: t.name, inputSchema: t.inputSchema })) };
  }
  if ("cancel_wait" in spec) {
    const progress = [];
    const abort = new AbortController();
    const started = Date.now();
    const waiting = call(client, "wait", spec.cancel_wait, {
      signal: abort.signal,
      onprogress: (p) => progress.push(p),
      timeout: 600_000,
    });
    while (progress.length < 2) {
      if (Date.now() - started > 30_000) return { error: "no progress within 30 s", progress };
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const during = [];
    for (const inner of spec.during ?? []) {
      const at = Date.now();
      const got = inner.ping ? await client.ping().then(() => ({ pong: true })) : await step(client, inner);
      during.push({ ...got, ms: Date.now() - at });
    }
    abort.abort("the test is done waiting");
    const ended = await waiting;
    return { progress, during, ended, ms: Date.now() - started };
  }
  if ("burst" in spec) {
    await new Promise((resolve) => setTimeout(resolve, spec.after_ms ?? 0));
    const calls = Array.from({ length: spec.burst }, () => call(client, spec.call, spec.arguments ?? {}));
    return { answers: await Promise.all(calls) };
  }
  if ("call" in spec) return call(client, spec.call, spec.arguments ?? {});
  if ("read" in spec) {
    try {
      const result = await client.readResource({ uri: spec.read });
      return { contents: result.contents.map((c) => ({ uri: c.uri, text: c.text ?? null })) };
    } catch (error) {
      return { error: String(error?.message ?? error) };
    }
  }
  throw new Error(`unknown step ${JSON.stringify(spec)}`);
}

const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
// The version the server agreed to, from the initialize answer as it passes.
let negotiated = null;
let handler;
Object.defineProperty(transport, "onmessage", {
  get() {
    return handler && ((message) => {
      negotiated ??= message?.result?.protocolVersion ?? null;
      handler(message);
    });
  },
  set(h) {
    handler = h;
  },
});
const client = new Client({ name: "carma-test-ts", version: "1.0.0" }, { capabilities: {} });
await client.connect(transport);
const answers = [];
for (const spec of JSON.parse(stepsJson)) answers.push(await step(client, spec));
const server = client.getServerVersion();
await client.close();
process.stdout.write(JSON.stringify({ protocol: negotiated, server: server?.name ?? null, steps: answers }) + "\n");
