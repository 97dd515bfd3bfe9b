/**
 * The one switch between this repository's sources and the installed package.
 *
 * Unset, the end-to-end suites run tokengate from src/ (in-process where a test reads its
 * internals). With `TOKENGATE_TEST_PACKAGE=<consumer project>`, every helper that starts
 * tokengate or runs its CLI runs the `tokengate` bin installed in that project's
 * node_modules instead, as a user does (`npx tokengate serve ...`), on that project's Node:
 * its `node` dependency when it has one (node@22), else the Node running the tests.
 * `npm run test:package` (test/package/run.ts) packs the tarball, installs it into such
 * projects and runs the suites against them.
 *
 * @example
 * const served = await launchTokengate({ dev: true, dataDir, server: { port: 0 } })
 * await fetch(`${served.url}/healthz`)
 * await served.close()
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, writeFileSync } from 'node:fs'
import { delimiter, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { loadConfig } from '../../src/config/load.ts'
import type { Clock } from '../../src/core/ports.ts'
import { type RunningTokengate, startTokengate } from '../../src/main.ts'
import { collectOutput } from './child-output.ts'
import { tempDir } from './temp-dir.ts'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** The consumer project whose installed package is under test, or undefined (the sources). */
export const PACKAGE_PROJECT: string | undefined = process.env.TOKENGATE_TEST_PACKAGE || undefined

/**
 * A `skip` reason for a test that needs tokengate in-process (its clock, its internals) when
 * the installed package is under test; false otherwise. Such tests run in `npm test`.
 */
export function needsSources(why: string): string | false {
  return PACKAGE_PROJECT ? `runs on the sources only: ${why}` : false
}

/** The Node that runs the bin: the consumer project's own `node` dependency, else this one. */
export function nodeUnderTest(): string {
  const own = PACKAGE_PROJECT && join(PACKAGE_PROJECT, 'node_modules', '.bin', 'node')
  return own && existsSync(own) ? own : process.execPath
}

/** The bin a user runs: the installed `node_modules/.bin/tokengate`, or bin/tokengate.js. */
function binPath(): string {
  return PACKAGE_PROJECT
    ? join(PACKAGE_PROJECT, 'node_modules', '.bin', 'tokengate')
    : join(ROOT, 'bin', 'tokengate.js')
}

export interface SpawnOptions {
  /** Added to a clean environment (PATH and HOME only): the machine's TOKENGATE_* never leak in. */
  readonly env?: Readonly<Record<string, string | undefined>>
  readonly cwd?: string
}

/**
 * Starts `tokengate ...args` as its own process through the bin's shebang (`env -S node
 * <flags>`), with the Node under test first on PATH, as `npx tokengate` would.
 */
export function spawnTokengate(args: readonly string[], options: SpawnOptions = {}): ChildProcess {
  const child = spawn(binPath(), [...args], {
    cwd: options.cwd ?? PACKAGE_PROJECT ?? ROOT,
    env: {
      PATH: `${dirname(nodeUnderTest())}${delimiter}${process.env.PATH ?? ''}`,
      HOME: process.env.HOME,
      ...options.env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  spawned.add(child)
  child.once('exit', () => spawned.delete(child))
  return child
}

// A test that failed before stopping what it started must not leave a server running.
const spawned = new Set<ChildProcess>()
process.on('exit', () => {
  for (const child of spawned) child.kill('SIGKILL')
})

export interface CliRun {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs `tokengate ...args` to completion as its own process; `input` is written to stdin. */
export function runTokengate(
  args: readonly string[],
  options: SpawnOptions & { readonly input?: string; readonly timeoutMs?: number } = {},
): Promise<CliRun> {
  const child = spawnTokengate(args, options)
  const output = collectOutput(child)
  // A command that exits before reading (a usage error) closes its stdin: not our failure.
  child.stdin?.on('error', () => {})
  child.stdin?.end(options.input)
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(
        new Error(`tokengate ${args.join(' ')}: no exit within the timeout: ${output.stderr()}`),
      )
    }, options.timeoutMs ?? 60_000)
    child.once('error', reject)
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      resolve({
        code: code ?? (signal ? 128 : 1),
        stdout: output.stdout(),
        stderr: output.stderr(),
      })
    })
  })
}

/** What `serve --json` prints once every listener is up. */
export interface ServeDocument {
  readonly url: string
  readonly metricsUrl?: string
  readonly adminUrl?: string
  readonly decisionUrl?: string
  readonly decisionGrpcUrl?: string
  readonly devSeed?: { readonly tenantId: string; readonly demoPat: string | null }
}

/** A running tokengate, in-process or a `tokengate serve` process: what the suites use. */
export interface Launched {
  readonly url: string
  readonly devSeed: { readonly tenantId: string; readonly demoPat: string | undefined } | undefined
  readonly metricsUrl: string | undefined
  readonly adminUrl: string | undefined
  readonly decisionUrl: string | undefined
  readonly decisionGrpcUrl: string | undefined
  /** The in-process instance (its internals), or undefined when a process is under test. */
  readonly inProcess: RunningTokengate | undefined
  /** Sends the running tokengate a signal (SIGHUP reloads policies): its process, or this one. */
  signal(name: NodeJS.Signals): void
  /** Graceful stop: in-flight requests finish, last-used times and audit events are flushed. */
  close(): Promise<void>
}

export interface LaunchOptions {
  /** Where log lines go (one JSON object a line). */
  readonly logDestination?: { write(line: string): unknown }
  /** tokengate's clock; in-process only (a process runs on the wall clock). */
  readonly clock?: Clock
  /** Environment of a `serve` process (e.g. REDIS_URL); in-process config comes from `overrides`. */
  readonly env?: Readonly<Record<string, string>>
}

/**
 * Starts tokengate with `overrides` (the configuration's shape, as a config file holds it),
 * validated here first either way. From the sources: `startTokengate` in this process. From
 * the package: `tokengate serve --config <file> --json` with the overrides as that file.
 */
export async function launchTokengate(
  overrides: Record<string, unknown>,
  options: LaunchOptions = {},
): Promise<Launched> {
  const config = loadConfig({ env: {}, overrides })
  if (!PACKAGE_PROJECT) {
    const running = await startTokengate(config, {
      ...(options.logDestination ? { logDestination: options.logDestination } : {}),
      ...(options.clock ? { clock: options.clock } : {}),
    })
    return {
      url: running.url,
      devSeed: running.devSeed,
      metricsUrl: running.metricsUrl,
      adminUrl: running.adminUrl,
      decisionUrl: running.decisionUrl,
      decisionGrpcUrl: running.decisionGrpcUrl,
      inProcess: running,
      signal: (name) => process.kill(process.pid, name),
      close: () => running.close(),
    }
  }
  const configFile = join(tempDir('tg-launch-'), 'tokengate.json')
  writeFileSync(configFile, JSON.stringify(overrides))
  const served = await serveProcess(['serve', '--config', configFile, '--json'], options)
  const { document } = served
  const seed = document.devSeed
  return {
    url: document.url,
    devSeed: seed && { tenantId: seed.tenantId, demoPat: seed.demoPat ?? undefined },
    metricsUrl: document.metricsUrl,
    adminUrl: document.adminUrl,
    decisionUrl: document.decisionUrl,
    decisionGrpcUrl: document.decisionGrpcUrl,
    inProcess: undefined,
    signal: (name) => served.child.kill(name),
    close: served.stop,
  }
}

export interface ServeProcess {
  readonly child: ChildProcess
  readonly document: ServeDocument
  /** Everything written to stderr so far (notes, and the log with `--json`). */
  stderr(): string
  /** The exit code once the process has exited. */
  readonly exited: Promise<number | null>
  /** SIGTERM, then waits for the exit (SIGKILL after 15 s). */
  stop(): Promise<void>
}

/**
 * Runs `tokengate serve ... --json` and resolves once its JSON document is on stdout; rejects
 * (with its stderr) when it exits first. Log lines (stderr, with `--json`) are passed on to
 * `options.logDestination` as they arrive.
 */
export async function serveProcess(
  args: readonly string[],
  options: LaunchOptions = {},
): Promise<ServeProcess> {
  const child = spawnTokengate(args, { env: options.env })
  child.stdin?.end()
  let stdout = ''
  let stderr = ''
  let partial = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk
  })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
    const lines = (partial + chunk).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      if (line.startsWith('{')) options.logDestination?.write(`${line}\n`)
    }
  })
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => resolve(code)),
  )
  const document = await new Promise<ServeDocument>((resolve, reject) => {
    const timer = setTimeout(
      () => finish(new Error(`serve did not start in 60 s: ${stderr}`)),
      60_000,
    )
    const finish = (error: Error | undefined, value?: ServeDocument) => {
      clearTimeout(timer)
      child.stdout?.off('data', check)
      child.off('exit', onExit)
      if (error) reject(error)
      else resolve(value as ServeDocument)
    }
    const check = () => {
      if (!stdout.trimEnd().endsWith('}')) return
      let parsed: ServeDocument & { error?: { message: string } }
      try {
        parsed = JSON.parse(stdout)
      } catch {
        return
      }
      // --json reports a failed start as {"error": {...}} on stdout too.
      if (parsed.error) finish(new Error(`serve failed: ${parsed.error.message}\n${stderr}`))
      else finish(undefined, parsed)
    }
    const onExit = (code: number | null) =>
      finish(new Error(`serve exited with ${code} before it was ready: ${stderr}`))
    child.stdout?.on('data', check)
    child.on('exit', onExit)
  })
  let stopping: Promise<void> | undefined
  return {
    child,
    document,
    stderr: () => stderr,
    exited,
    stop() {
      stopping ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const kill = setTimeout(() => child.kill('SIGKILL'), 15_000)
          child.kill('SIGTERM')
          await exited
          clearTimeout(kill)
        }
      })()
      return stopping
    },
  }
}
