/**
 * `tokengate serve` as a real process (the TypeScript sources, as the repository runs them),
 * for tests that signal, limit or kill it. Resolves once it printed its `--json` document.
 *
 * @example
 * const served = await spawnServe({ env: { TOKENGATE_DATA_DIR: dir } })
 * await fetch(`${served.url}/healthz`)
 * await served.stop()
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { collectOutput } from './child-output.ts'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

export interface ServeProcess {
  readonly child: ChildProcess
  /** The listener, e.g. `http://127.0.0.1:40123`. */
  readonly url: string
  /** Everything written to stderr so far (the log, with `--json`). */
  stderr(): string
  /** The `--json` document on stdout (dev mode: the demo PAT on the first start). */
  stdout(): string
  /** SIGTERM, then waits for the exit. Idempotent. */
  stop(): Promise<void>
}

export async function spawnServe(options: {
  /** Environment besides PATH (TOKENGATE_*, DATABASE_URL, ...). */
  readonly env: Record<string, string>
  /** Default: `--dev --http --listen 127.0.0.1:0`. */
  readonly args?: readonly string[]
  /** A command that runs node, e.g. `['prlimit', '--nofile=256:256', '--']`. */
  readonly wrap?: readonly string[]
}): Promise<ServeProcess> {
  const args = [
    'src/entry.ts',
    'serve',
    ...(options.args ?? ['--dev', '--http', '--listen', '127.0.0.1:0']),
    '--json',
  ]
  const [command, ...prefix] = [...(options.wrap ?? []), process.execPath]
  const child = spawn(command as string, [...prefix, ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const { stdout, stderr } = collectOutput(child)
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM')
      await exited
    }
  }
  for (let i = 0; i < 1200 && child.exitCode === null && !stdout().trim().endsWith('}'); i++) {
    await sleep(25)
  }
  if (!stdout().trim().endsWith('}')) {
    await stop()
    throw new Error(`serve did not start (exit ${child.exitCode}): ${stderr().slice(-2000)}`)
  }
  const { url } = JSON.parse(stdout()) as { url: string }
  return { child, url, stderr, stdout, stop }
}

/** The worker processes of a `server.workers` primary: its children, from /proc (Linux). */
export function childrenOf(pid: number): number[] {
  const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim()
  return text === '' ? [] : text.split(' ').map(Number)
}

/** The status of one GET on a fresh connection (so node:cluster hands it to the next worker). */
export function statusOnFreshConnection(url: string, token: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      { agent: false, headers: { authorization: `Bearer ${token}` } },
      (res) => {
        res.resume()
        res.on('end', () => resolve(res.statusCode ?? 0))
      },
    )
    req.on('error', reject)
    req.end()
  })
}
