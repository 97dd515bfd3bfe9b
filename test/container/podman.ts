/**
 * Runs the tokengate image with podman for the container suite: every container started here
 * is removed by `removeAll`, and every request goes over real HTTPS to the container's port on
 * the host network. Podman's machine settings (runc, cgroupfs, vfs, ulimits) come from
 * /etc/containers, written by .ci/run.
 */
import { execFile, execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chownSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { request } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

/** The uid the image runs as (Containerfile `USER`). */
export const IMAGE_UID = 65532

const version = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'))
  .version as string

/** The image under test: TOKENGATE_IMAGE, or what `npm run image` tags for this version. */
export const IMAGE = process.env.TOKENGATE_IMAGE ?? `localhost/tokengate:${version}`

/** The CLI on the image's PATH, for `podman exec` (as docs/container.md shows it). */
export const BIN = ['tokengate']

/**
 * Why the suite cannot run here, or false. Under CI=true a missing podman or image is an
 * error (`npm run image` runs before the suite), not a skip.
 */
export function imageSkipReason(): string | false {
  let reason: string | undefined
  try {
    execFileSync('podman', ['--version'], { stdio: 'pipe' })
    try {
      execFileSync('podman', ['image', 'exists', IMAGE], { stdio: 'pipe' })
    } catch {
      reason = `image ${IMAGE} not built (npm run image)`
    }
  } catch {
    reason = 'podman is not installed (apt-get install podman runc uidmap)'
  }
  if (reason === undefined) return false
  if (process.env.CI === 'true')
    throw new Error(`CI=true but the container suite cannot run: ${reason}`)
  return reason
}

export interface Result {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs `podman ...args`; resolves with its exit code and output (never rejects on a code). */
export function podman(args: readonly string[], timeoutMs = 120_000): Promise<Result> {
  return new Promise((resolve, reject) => {
    execFile(
      'podman',
      args,
      { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error && typeof error.code !== 'number') reject(error)
        else resolve({ code: error ? Number(error.code) : 0, stdout, stderr })
      },
    )
  })
}

/** `podman ...args`, which must exit 0; its stdout. */
export async function podmanOk(args: readonly string[], timeoutMs?: number): Promise<string> {
  const result = await podman(args, timeoutMs)
  if (result.code !== 0) {
    throw new Error(`podman ${args.join(' ')}: exit ${result.code}\n${result.stderr}`)
  }
  return result.stdout
}

/**
 * A data directory owned by the image's uid and a secrets directory with a self-signed
 * certificate for 127.0.0.1 (and any files added to it), mounted read-only.
 */
export interface Mounts {
  readonly dataDir: string
  readonly secretsDir: string
  /** The certificate's PEM, to verify the server with. */
  readonly ca: string
  /** Writes a file (0644) into the secrets directory; returns its path in the container. */
  secret(name: string, content: string): string
  remove(): void
}

export function createMounts(): Mounts {
  const root = mkdtempSync(join(tmpdir(), 'tg-image-'))
  const dataDir = join(root, 'data')
  const secretsDir = join(root, 'secrets')
  execFileSync('mkdir', ['-p', dataDir, secretsDir])
  chownSync(dataDir, IMAGE_UID, IMAGE_UID)
  writeSelfSignedCertificate(join(secretsDir, 'tls.key'), join(secretsDir, 'tls.crt'))
  // The key is readable by the container's uid through the read-only mount only.
  chownSync(join(secretsDir, 'tls.key'), IMAGE_UID, IMAGE_UID)
  return {
    dataDir,
    secretsDir,
    ca: readFileSync(join(secretsDir, 'tls.crt'), 'utf8'),
    secret(name, content) {
      writeFileSync(join(secretsDir, name), content, { mode: 0o644 })
      return `/run/secrets/${name}`
    },
    remove: () => rmSync(root, { recursive: true, force: true }),
  }
}

/** A container of the image, created by `runContainer`. */
export interface Container {
  readonly name: string
  readonly port: number
  readonly adminPort: number
  readonly url: string
  /** The PEM of the certificate it serves. */
  readonly ca: string
  /** Resolves once /readyz answers 200; the milliseconds since `since`. */
  ready(since: number, timeoutMs?: number): Promise<number>
  /** The CLI in the running container (`podman exec`), with the container's environment. */
  cli(...args: string[]): Promise<Result>
  /** The server process as the host sees it. */
  hostPid(): Promise<number>
  exitCode(): Promise<number>
}

const started = new Set<string>()
// A run that dies between `after` hooks must not leave containers behind either.
process.on('exit', () => {
  for (const name of started) {
    try {
      execFileSync('podman', ['rm', '--force', '--time', '0', name], { stdio: 'ignore' })
    } catch {}
  }
})

/**
 * `podman run -d` of the image, the way the docs run it: read-only root filesystem, the
 * image's non-root uid, the data volume, the certificate as mounted files, host network.
 */
export async function runContainer(
  mounts: Mounts,
  options: { port: number; adminPort: number; env?: Record<string, string> },
): Promise<Container> {
  const name = `tg-test-${randomBytes(4).toString('hex')}`
  const env: Record<string, string> = {
    TOKENGATE_HOST: '127.0.0.1',
    TOKENGATE_PORT: String(options.port),
    TOKENGATE_TLS_CERT_FILE: '/run/secrets/tls.crt',
    TOKENGATE_TLS_KEY_FILE: '/run/secrets/tls.key',
    TOKENGATE_ADMIN_PORT: String(options.adminPort),
    ...options.env,
  }
  started.add(name)
  await podmanOk([
    'create',
    '--name',
    name,
    '--read-only',
    '--user',
    String(IMAGE_UID),
    '--network',
    'host',
    '-v',
    `${mounts.dataDir}:/var/lib/tokengate`,
    '-v',
    `${mounts.secretsDir}:/run/secrets:ro`,
    ...Object.entries(env).flatMap(([key, value]) => ['-e', `${key}=${value}`]),
    IMAGE,
  ])
  const container: Container = {
    name,
    port: options.port,
    adminPort: options.adminPort,
    url: `https://127.0.0.1:${options.port}`,
    ca: mounts.ca,
    async ready(since, timeoutMs = 60_000) {
      const deadline = performance.now() + timeoutMs
      for (;;) {
        const reply = await get(mounts.ca, container.url, '/readyz').catch(() => undefined)
        if (reply?.status === 200) return performance.now() - since
        if (performance.now() > deadline) {
          const logs = await podman(['logs', name])
          throw new Error(`${name} not ready after ${timeoutMs} ms:\n${logs.stdout}${logs.stderr}`)
        }
        await sleep(50)
      }
    },
    cli: (...args) => podman(['exec', name, ...BIN, ...args]),
    async hostPid() {
      return Number((await podmanOk(['inspect', '--format', '{{.State.Pid}}', name])).trim())
    },
    async exitCode() {
      return Number((await podmanOk(['inspect', '--format', '{{.State.ExitCode}}', name])).trim())
    },
  }
  return container
}

/** Removes every container this process started, running or not. */
export async function removeAll(): Promise<void> {
  for (const name of started) {
    await podman(['rm', '--force', '--time', '0', name])
    started.delete(name)
  }
}

export interface Reply {
  readonly status: number
  readonly body: string
}

/**
 * One HTTPS request on a fresh connection, verified against the test certificate. Rejects
 * with `accepted: true` on the error when the TLS handshake had completed (the server had
 * taken the connection), `accepted: false` when it never did (refused, reset before it).
 */
export function get(
  ca: string,
  url: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    let accepted = false
    const req = request(`${url}${path}`, { ca, headers, agent: false, timeout: 30_000 }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      res.on('error', (error) => reject(Object.assign(error, { accepted: true })))
    })
    req.on('socket', (socket) => socket.once('secureConnect', () => (accepted = true)))
    req.on('timeout', () => req.destroy(new Error('timed out')))
    req.on('error', (error) => reject(Object.assign(error, { accepted })))
    req.end()
  })
}

/** A one-day self-signed P-256 certificate for localhost and 127.0.0.1, made by openssl. */
export function writeSelfSignedCertificate(keyFile: string, certFile: string): void {
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1,DNS:localhost',
      '-keyout',
      keyFile,
      '-out',
      certFile,
    ],
    { stdio: 'pipe' },
  )
}
