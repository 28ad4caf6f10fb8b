// The OpenSandbox JS SDK (npm @alibaba-group/opensandbox 0.1.11, unmodified)
// pointed straight at an execd: the execd stack the SDK builds for a
// sandbox, without a lifecycle server. Prints one JSON line of what it saw;
// tests/integration/test_opensandbox_js.py checks it.
import { ConnectionConfig, DefaultAdapterFactory } from "@alibaba-group/opensandbox";

const [, , baseUrl, token, dir] = process.argv;
const stack = new DefaultAdapterFactory().createExecdStack({
  connectionConfig: new ConnectionConfig({ protocol: "http" }),
  execdBaseUrl: baseUrl,
  endpointHeaders: { "X-EXECD-ACCESS-TOKEN": token },
});
const { commands, files, health, metrics } = stack;
const seen = {};
const out = (ex) => ex.logs.stdout.map((m) => m.text);

seen.ping = await health.ping();
const md = "| a | b |\n|---|---|\n\n| 1 | 2 |";
let ex = await commands.run(`printf '%s\\n' '${md.split("\n").join("' '")}'; echo err >&2`);
seen.markdown = { stdout: out(ex), stderr: ex.logs.stderr.map((m) => m.text), exitCode: ex.exitCode };
ex = await commands.run("pwd; echo \"$GREETING\"", { workingDirectory: dir, envs: { GREETING: "hi js" } });
seen.cwdEnv = out(ex);
ex = await commands.run("exit 3");
seen.failed = { exitCode: ex.exitCode, error: ex.error?.value ?? null };
ex = await commands.run("echo bg-line; sleep 0.2; echo bg-done", { background: true });
const id = ex.id;
let status;
for (let i = 0; i < 200; i++) {
  status = await commands.getCommandStatus(id);
  if (status.running === false) break;
  await new Promise((r) => setTimeout(r, 25));
}
seen.background = { running: status.running, exitCode: status.exitCode };
const logs = await commands.getBackgroundCommandLogs(id);
seen.backgroundLogs = logs.content;
const sid = await commands.createSession({ workingDirectory: dir });
await commands.runInSession(sid, "export KEPT=across-runs; cd /");
ex = await commands.runInSession(sid, "echo \"$KEPT $(pwd)\"");
seen.session = out(ex);
await commands.deleteSession(sid);
await files.writeFiles([{ path: `${dir}/js.txt`, data: "written by js\n", mode: 640 }]);
seen.read = await files.readFile(`${dir}/js.txt`);
const info = await files.getFileInfo([`${dir}/js.txt`]);
seen.info = { size: info[`${dir}/js.txt`].size, mode: info[`${dir}/js.txt`].mode };
const m = await metrics.getMetrics();
seen.metrics = m;
process.stdout.write(JSON.stringify(seen) + "\n");
