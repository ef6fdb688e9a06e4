// cryo's plugin for OpenCode, written by cryod into the chamber and named
// in OPENCODE_CONFIG_CONTENT when the chamber has an [approvals] policy:
// before each tool call (cryo's own aside) it asks cryod with
// `cryo-agent approval` (the program named by CRYO_AGENT_BIN, in the
// session's environment), which may wait for a person; a refusal is thrown,
// and OpenCode hands its message to the model. Anything that goes wrong
// refuses the call.
import { execFile } from "node:child_process";

const ask = (tool, args) =>
  new Promise((resolve) => {
    const program = process.env.CRYO_AGENT_BIN;
    if (!program) return resolve({ behavior: "deny", message: "cryo: CRYO_AGENT_BIN is not set" });
    execFile(
      program,
      ["approval", "--tool", tool, "--input", JSON.stringify(args ?? {})],
      { maxBuffer: 1 << 20 },
      (error, stdout) => {
        try {
          resolve(JSON.parse(stdout));
        } catch {
          resolve({ behavior: "deny", message: `cryo could not judge this call${error ? `: ${error.message}` : ""}` });
        }
      },
    );
  });

// cryo's own tools, as OpenCode names them (exactly those: a server of
// the agent's own named cryo_x is asked about).
const OURS = new Set(["hibernate", "send", "receive", "dialog", "todo_add", "todo_list", "todo_done", "todo_remove", "time", "approval"].map((v) => `cryo_${v}`));

export const CryoApprovals = async () => ({
  "tool.execute.before": async (input, output) => {
    if (OURS.has(String(input.tool))) return;
    const answer = await ask(String(input.tool), output.args);
    if (answer?.behavior !== "allow") throw new Error(answer?.message || "cryo refused this call");
  },
});
