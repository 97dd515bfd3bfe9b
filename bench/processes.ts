/**
 * Benchmark processes: pinned to one CPU with `taskset` (when present on 2+ CPUs), started
 * until they say READY or accept connections, stopped by their own pid.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { type AddressInfo, createConnection } from 'node:net'
import { cpus } from 'node:os'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { commandExists } from './load.ts'

export const CAN_PIN = cpus().length >= 2 && commandExists('taskset')

/** `command argv` run on `cpu` (a taskset CPU list); unpinned without taskset or a cpu. */
export function pinned(
  cpu: number | string | undefined,
  command: string,
  argv: string[],
): [string, string[]] {
  return CAN_PIN && cpu !== undefined
    ? ['taskset', ['-c', String(cpu), command, ...argv]]
    : [command, argv]
}

export interface Started {
  readonly child: ChildProcess
  /** Everything the process printed on stdout up to its READY line. */
  readonly output: string
}

/**
 * Starts `node argv` on `cpu` and waits for a line starting with READY (the bench servers'
 * signal); stderr is passed through. `env` is added to the environment of this process only.
 */
export function startNode(
  cpu: number | string,
  argv: string[],
  env: Record<string, string> = {},
): Promise<Started> {
  const [command, args] = pinned(cpu, process.execPath, argv)
  const child = spawn(command, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  })
  return new Promise((resolve, reject) => {
    let output = ''
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`${argv.join(' ')} did not start within 60 s`))
    }, 60_000)
    child.stdout?.setEncoding('utf8')
    child.stdout?.on('data', (chunk: string) => {
      output += chunk
      if (/^READY/m.test(output)) {
        clearTimeout(timer)
        child.removeAllListeners('exit')
        resolve({ child, output })
      }
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`${argv.join(' ')} exited with ${code}`))
    })
  })
}

/**
 * Starts `node argv` (on `cpu`, when given) and resolves with the JSON object of its first
 * stdout line: what a bench that runs itself as its own servers reports (URLs, tokens).
 */
export function startReporting<Info = Record<string, string>>(
  cpu: number | undefined,
  argv: string[],
): Promise<{ child: ChildProcess; info: Info }> {
  const [command, args] = pinned(cpu, process.execPath, argv)
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] })
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
    lines.once('line', (line) => resolve({ child, info: JSON.parse(line) as Info }))
    child.once('exit', (code) => reject(new Error(`${argv.join(' ')} exited with ${code}`)))
  })
}

/** In the child: `message` as the one JSON line startReporting resolves with. */
export function report(message: object): void {
  process.stdout.write(`${JSON.stringify(message)}\n`)
}

/**
 * In the child: the upstream of a self-spawning bench, a small JSON body for every request
 * (its body read first), kept alive; resolves with its port on 127.0.0.1.
 */
export async function listenJsonUpstream(): Promise<number> {
  const body = JSON.stringify({ id: 'p1', name: 'Apollo', tags: ['a', 'b', 'c'] })
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(body)
    })
  })
  server.keepAliveTimeout = 65_000
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return (server.address() as AddressInfo).port
}

/** Starts a non-Node program on `cpu` and waits until `port` accepts connections. */
export async function startListening(
  cpu: number | string | undefined,
  command: string,
  argv: string[],
  ports: readonly number[],
): Promise<ChildProcess> {
  const [program, args] = pinned(cpu, command, argv)
  const child = spawn(program, args, { stdio: ['ignore', 'ignore', 'inherit'] })
  const deadline = Date.now() + 10_000
  for (const port of ports) {
    while (!(await accepts(port))) {
      if (child.exitCode !== null || Date.now() > deadline) {
        child.kill('SIGKILL')
        throw new Error(`${command} did not start listening on ${port}`)
      }
      await sleep(50)
    }
  }
  return child
}

/** Stops a child by its pid and waits for it to exit (SIGKILL after 10 s). */
export async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/** Whether 127.0.0.1:`port` accepts a connection. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}
