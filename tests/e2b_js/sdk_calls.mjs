// E2B's JS SDK (npm e2b 2.51.0, unmodified) against execd's envd listener, in
// debug mode (E2B_DEBUG=true, E2B_SANDBOX_URL). Makes the calls the issue
// lists and prints what it observed as one JSON object on stdout; the
// assertions are in tests/integration/test_e2b_js.py. argv[2] is a scratch
// directory.
import { Sandbox, CommandExitError, TimeoutError } from 'e2b'
import { readFileSync, existsSync } from 'node:fs'

const dir = process.argv[2]
const seen = {}
const wait = (ms) => new Promise((r) => setTimeout(r, ms))
async function until(pred, ms, what) {
  const end = Date.now() + ms
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await wait(20)
  }
}
const decoder = () => new TextDecoder()

const sbx = await Sandbox.create()
seen.isRunning = await sbx.isRunning()

// Foreground commands, callbacks, exact text.
{
  const outs = [], errs = []
  const r = await sbx.commands.run(process.env.EXACT_CMD, {
    onStdout: (d) => outs.push(d), onStderr: (d) => errs.push(d),
  })
  seen.exact = { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, joinedOut: outs.join(''), joinedErr: errs.join('') }
}
try {
  await sbx.commands.run('echo partial; exit 5')
  seen.exitError = null
} catch (e) {
  seen.exitError = { isCommandExitError: e instanceof CommandExitError, exitCode: e.exitCode, stdout: e.stdout, error: e.error }
}
{
  const r = await sbx.commands.run('echo $A; pwd; id -un', { envs: { A: 'js env' }, cwd: '/tmp', user: 'nobody' })
  seen.userEnvsCwd = r.stdout
}
try {
  await sbx.commands.run('sleep 5151', { timeoutMs: 1000 })
  seen.timeout = 'no error'
} catch (e) {
  seen.timeout = e instanceof TimeoutError ? 'TimeoutError' : `${e.constructor.name}: ${e.message}`
}

// Background, wait, kill, list, connect.
{
  const h = await sbx.commands.run('sleep 0.1; echo bg', { background: true })
  seen.background = (await h.wait()).stdout
  const k = await sbx.commands.run('sleep 5252 & sleep 5253; echo never', { background: true })
  seen.listed = (await sbx.commands.list()).some((p) => p.pid === k.pid && p.cmd === '/bin/bash')
  seen.killed = await sbx.commands.kill(k.pid)
  seen.killedEnd = await k.wait().then(() => 'exit 0', (e) => `${e.exitCode} ${e.error}`)
  seen.killAgain = await sbx.commands.kill(k.pid)

  const marker = `${dir}/written`
  const d = await sbx.commands.run(`for i in 1 2 3; do echo js$i; done; touch ${marker}; sleep 0.3; echo late`, { background: true })
  await d.disconnect()
  await until(() => existsSync(marker), 10000, 'the detached output')
  const c = await sbx.commands.connect(d.pid)
  seen.connected = (await c.wait()).stdout
}

// stdin.
{
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'js stdin\n')
  await h.sendStdin(new Uint8Array([0x62, 0x79, 0x74, 0x65, 0x73, 0x0a]))
  await sbx.commands.closeStdin(h.pid)
  seen.stdin = (await h.wait()).stdout
}

// PTY.
{
  const out = []
  const text = () => decoder().decode(Buffer.concat(out.map((b) => Buffer.from(b))))
  const p = await sbx.pty.create({ cols: 90, rows: 25, onData: (d) => out.push(d) })
  await sbx.pty.sendInput(p.pid, new TextEncoder().encode('stty size\n'))
  await until(() => text().includes('25 90'), 10000, 'stty size')
  await sbx.pty.resize(p.pid, { cols: 111, rows: 44 })
  await sbx.pty.sendInput(p.pid, new TextEncoder().encode('stty size\n'))
  await until(() => text().includes('44 111'), 10000, 'the new size')
  seen.ptyKilled = await sbx.pty.kill(p.pid)
  seen.ptySizes = ['25 90', '44 111'].filter((s) => text().includes(s))
}

// Files.
{
  const f = `${dir}/files`
  await sbx.files.write(`${f}/a.txt`, 'js text\n\n')
  await sbx.files.write(`${f}/b.bin`, new Uint8Array([0, 255, 1, 254]).buffer)
  const many = await sbx.files.write([{ path: `${f}/m/1.txt`, data: 'one' }, { path: `${f}/m/2.txt`, data: 'two' }])
  seen.writeMany = many.map((w) => w.path)
  seen.readText = await sbx.files.read(`${f}/a.txt`)
  seen.readBytes = Array.from(await sbx.files.read(`${f}/b.bin`, { format: 'bytes' }))
  seen.onDisk = Array.from(readFileSync(`${f}/b.bin`))
  seen.list1 = (await sbx.files.list(f)).map((e) => `${e.name}:${e.type}`).sort()
  seen.list2 = (await sbx.files.list(f, { depth: 2 })).map((e) => e.path).sort()
  seen.exists = [await sbx.files.exists(`${f}/a.txt`), await sbx.files.exists(`${f}/nope`)]
  const info = await sbx.files.getInfo(`${f}/a.txt`)
  seen.info = { name: info.name, type: info.type, size: info.size }
  seen.makeDir = [await sbx.files.makeDir(`${f}/new/dir`), await sbx.files.makeDir(`${f}/new/dir`)]
  seen.renamed = (await sbx.files.rename(`${f}/a.txt`, `${f}/new/a.txt`)).path
  await sbx.files.remove(`${f}/m`)
  seen.removed = !existsSync(`${f}/m`)

  const events = []
  const w = await sbx.files.watchDir(`${f}/new`, (e) => events.push(`${e.name}:${e.type}`), { recursive: true })
  await sbx.files.write(`${f}/new/dir/w.txt`, 'watched')
  await until(() => events.includes('dir/w.txt:create'), 10000, `the watch event (${events})`)
  await w.stop()
  seen.watchEvents = events

  const up = await sbx.uploadUrl(`${f}/url.txt`)
  const form = new FormData()
  form.append('file', new Blob(['via url']), 'url.txt')
  seen.uploadStatus = (await fetch(up, { method: 'POST', body: form })).status
  seen.downloaded = await (await fetch(await sbx.downloadUrl(`${f}/url.txt`))).text()
}

process.stdout.write(JSON.stringify(seen) + '\n')
