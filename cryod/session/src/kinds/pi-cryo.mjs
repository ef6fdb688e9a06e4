// cryo's extension for Pi, written by cryod into the chamber and loaded
// with `pi -e`. Pi has neither an MCP client nor a variable for its
// provider's base URL, so this extension
// - redirects the session's provider (CRYO_PI_PROVIDER) to cryo's gateway
//   (CRYO_PI_BASE), with the session's credential (CRYO_PI_TOKEN) as its key;
// - starts `cryo-agent mcp` (the program named by CRYO_AGENT_MCP), lists its
//   tools, and offers each to the model as `cryo_NAME`, calling it through
//   the server;
// - with CRYO_APPROVALS=1 (an [approvals] policy), asks cryod before each
//   tool call and blocks what it refuses.
import { spawn } from "node:child_process";

export default async function (pi) {
  const provider = process.env.CRYO_PI_PROVIDER;
  if (provider && process.env.CRYO_PI_BASE) {
    pi.registerProvider(provider, { baseUrl: process.env.CRYO_PI_BASE, apiKey: "CRYO_PI_TOKEN" });
  }
  const program = process.env.CRYO_AGENT_MCP;
  if (!program) return;
  const child = spawn(program, ["mcp"], { stdio: ["pipe", "pipe", "inherit"] });
  const waiting = new Map();
  let next = 1;
  let buffer = "";
  const fail = (why) => {
    for (const resolve of waiting.values()) resolve({ error: { message: why } });
    waiting.clear();
  };
  child.on("error", (e) => fail(`cryo-agent mcp did not start: ${e.message}`));
  child.on("exit", () => fail("cryo-agent mcp exited"));
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk) => {
    buffer += chunk;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      let message;
      try {
        message = JSON.parse(line);
      } catch {
        continue;
      }
      const resolve = waiting.get(message.id);
      if (resolve) {
        waiting.delete(message.id);
        resolve(message);
      }
    }
  });
  const send = (message) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...message }) + "\n");
  // The server keeps Pi alive only while a call waits on it, not once its
  // run is over.
  const hold = (on) => {
    for (const handle of [child, child.stdout, child.stdin]) (on ? handle.ref : handle.unref)?.call(handle);
  };
  const call = (method, params) =>
    new Promise((resolve) => {
      const id = next++;
      hold(true);
      waiting.set(id, (answer) => {
        if (waiting.size === 0) hold(false);
        resolve(answer);
      });
      send({ id, method, params });
    });
  // `[approvals]`: every tool call but cryo's own asks cryod first, through
  // the server's `approval` tool (which may wait for a person); a refusal
  // blocks it with cryod's reason, and so does anything that goes wrong.
  // cryo's own tools, as this extension registers them (exactly those: a
  // tool of another extension named cryo_x is asked about).
  const ours = new Set();
  if (process.env.CRYO_APPROVALS === "1") {
    pi.on("tool_call", async (event) => {
      if (ours.has(String(event.toolName))) return undefined;
      const r = await call("tools/call", {
        name: "approval",
        arguments: { tool_name: String(event.toolName), input: event.input ?? {} },
      });
      let answer = null;
      try {
        answer = JSON.parse(r.result?.content?.[0]?.text ?? "");
      } catch {}
      if (answer?.behavior === "allow") return undefined;
      return { block: true, reason: answer?.message ?? r.error?.message ?? "cryo could not judge this call" };
    });
  }
  const hello = await call("initialize", {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name: "cryo-pi", version: "1" },
  });
  if (hello.error) {
    console.error(`cryo: ${hello.error.message}`);
    return;
  }
  send({ method: "notifications/initialized" });
  const listed = await call("tools/list", {});
  for (const tool of listed.result?.tools ?? []) {
    ours.add(`cryo_${tool.name}`);
    pi.registerTool({
      name: `cryo_${tool.name}`,
      label: `cryo ${tool.name}`,
      description: tool.description ?? "",
      parameters: tool.inputSchema ?? { type: "object", properties: {} },
      async execute(_id, params) {
        const answer = await call("tools/call", { name: tool.name, arguments: params ?? {} });
        if (answer.error) throw new Error(answer.error.message);
        const content = (answer.result?.content ?? [])
          .filter((c) => c.type === "text")
          .map((c) => ({ type: "text", text: c.text }));
        if (answer.result?.isError) throw new Error(content.map((c) => c.text).join("\n") || `${tool.name} failed`);
        return { content, details: {} };
      },
    });
  }
}
