/**
 * Helpers for the scale-out suites: real tokengate instances (plain HTTP on 127.0.0.1:0, as
 * behind a TLS-terminating proxy; the sources or the installed package, helpers/launch.ts)
 * sharing one throwaway Postgres, an admin store for setup and for changes that bypass
 * tokengate, the operator CLI against the same database, and a poller that measures how long
 * a condition takes.
 *
 * @example
 * const pg = await startPostgres()
 * const url = await pg.createDatabase()
 * const a = await startInstance(url)
 * const r = await a.request('/api/v1/me', { authorization: `Bearer ${token}` })
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { run } from '../../src/cli/main.ts'
import { issuePat } from '../../src/core/pat.ts'
import { openPostgresStore, type PostgresStore } from '../../src/stores/postgres.ts'
import { type Launched, launchTokengate, PACKAGE_PROJECT, runTokengate } from '../helpers/launch.ts'
import { type PostgresServer, startPostgres } from '../helpers/services.ts'

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly json: Record<string, unknown>
}

/**
 * Switches rate limiting off: these suites poll an instance hard from one address until it
 * answers 401, and the failed-authentication throttle would turn those 401s into 429s.
 * What they measure is cache coherence, not limits.
 */
export const NO_RATE_LIMITS = { rateLimit: { enabled: false } } as const

/** One running tokengate instance. */
export interface Instance {
  readonly url: string
  readonly running: Launched
  /** Every log line so far (JSON strings). */
  readonly logs: string[]
  request(path: string, headers?: Record<string, string>, method?: string): Promise<Reply>
  close(): Promise<void>
}

/**
 * Starts tokengate on `databaseUrl` with its own data directory and without rate limits.
 * `overrides` are merged over the defaults in the configuration's shape, e.g.
 * `{ auth: { lookupCacheTtlMs: 0 } }`.
 */
export async function startInstance(
  databaseUrl: string,
  overrides: Record<string, unknown> = {},
): Promise<Instance> {
  const dataDir = mkdtempSync(join(tmpdir(), 'tg-scale-'))
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  const { server, ...rest } = overrides
  const running = await launchTokengate(
    {
      dataDir,
      databaseUrl,
      server: { port: 0, plainHttp: true, shutdownTimeoutMs: 1000, ...(server as object) },
      log: { level: 'warn' },
      ...NO_RATE_LIMITS,
      ...rest,
    },
    { logDestination: sink },
  )
  return {
    url: running.url,
    running,
    logs,
    async request(path, headers = {}, method = 'GET') {
      const response = await fetch(`${running.url}${path}`, {
        method,
        headers,
        signal: AbortSignal.timeout(10_000),
      })
      const text = await response.text()
      let json: Record<string, unknown> = {}
      try {
        json = JSON.parse(text)
      } catch {}
      return { status: response.status, headers: response.headers, json }
    },
    async close() {
      await running.close()
      rmSync(dataDir, { recursive: true, force: true })
    },
  }
}

/** A throwaway Postgres with one database, its admin store and two instances on it. */
export interface TwoInstances {
  readonly pg: PostgresServer
  readonly databaseUrl: string
  readonly admin: PostgresStore
  readonly a: Instance
  readonly b: Instance
  /** Stops the instances, the admin store and Postgres. */
  close(): Promise<void>
}

/**
 * The two-instance setup of the scale-out suites: Postgres, a database, the admin store with
 * `tenants` (default: acme), then `prepare` (tokens or operators the instances must find),
 * then instances A and B with the same `overrides`. A failed start stops what it started.
 */
export async function startTwoInstances(
  options: {
    readonly overrides?: Record<string, unknown>
    readonly tenants?: readonly { readonly id: string; readonly name: string }[]
    readonly prepare?: (admin: PostgresStore, databaseUrl: string) => Promise<void>
  } = {},
): Promise<TwoInstances> {
  const pg = await startPostgres()
  const started: { close(): Promise<void> }[] = []
  const close = async () => {
    for (const running of started.reverse()) await running.close()
    await pg.stop()
  }
  try {
    const databaseUrl = await pg.createDatabase()
    const admin = await openAdminStore(databaseUrl)
    started.push(admin)
    for (const tenant of options.tenants ?? [{ id: 'acme', name: 'Acme' }]) {
      await admin.createTenant(tenant, Date.now())
    }
    await options.prepare?.(admin, databaseUrl)
    const a = await startInstance(databaseUrl, options.overrides)
    started.push(a)
    const b = await startInstance(databaseUrl, options.overrides)
    started.push(b)
    return { pg, databaseUrl, admin, a, b, close }
  } catch (error) {
    await close()
    throw error
  }
}

/** `Authorization` for a token, plus `X-Tenant-Id` when given (JWTs need it). */
export function bearer(token: string, tenantId?: string): Record<string, string> {
  return tenantId === undefined
    ? { authorization: `Bearer ${token}` }
    : { authorization: `Bearer ${token}`, 'x-tenant-id': tenantId }
}

/** A store for test setup, without a change-feed connection of its own. Migrated. */
export async function openAdminStore(databaseUrl: string): Promise<PostgresStore> {
  const store = await openPostgresStore(databaseUrl, { listen: false })
  await store.migrate()
  return store
}

/** Inserts a fresh PAT straight into the store; returns its plaintext and id. */
export async function insertPat(
  store: PostgresStore,
  tenantId: string,
  permissions: readonly string[] = [],
): Promise<{ token: string; id: string }> {
  const now = Date.now()
  const { token, record } = issuePat({
    tenantId,
    subject: 'scale-test',
    name: 'scale test',
    permissions,
    expiresAt: now + 86_400_000,
    now,
  })
  await store.insertPat(record)
  return { token, id: record.id }
}

/** Runs the operator CLI with `DATABASE_URL` set, as an operator's shell would. */
export async function cli(
  databaseUrl: string,
  ...args: string[]
): Promise<{ code: number; stdout: string; stderr: string }> {
  if (PACKAGE_PROJECT) return runTokengate(args, { env: { DATABASE_URL: databaseUrl } })
  let stdout = ''
  let stderr = ''
  const code = await run(args, {
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
    env: { DATABASE_URL: databaseUrl },
  })
  return { code, stdout, stderr }
}

/** `tokengate admin token issue --role operator` through the CLI; returns the plaintext. */
export async function issueOperatorToken(databaseUrl: string): Promise<string> {
  const issued = await cli(
    databaseUrl,
    'admin',
    'token',
    'issue',
    '--name',
    'ops',
    '--role',
    'operator',
    '--json',
  )
  assert.equal(issued.code, 0, issued.stderr)
  return (JSON.parse(issued.stdout) as { token: string }).token
}

/** `tokengate pat issue` for tenant acme through the CLI, with extra `flags`. */
export async function issuePatWithCli(
  databaseUrl: string,
  ...flags: string[]
): Promise<{ token: string; id: string }> {
  const out = await cli(
    databaseUrl,
    'pat',
    'issue',
    '--tenant',
    'acme',
    '--subject',
    'scale',
    '--json',
    ...flags,
  )
  assert.equal(out.code, 0, out.stderr)
  return JSON.parse(out.stdout) as { token: string; id: string }
}

/**
 * Calls `probe` every `intervalMs` until it returns true; resolves with the milliseconds
 * from `since` (default: now) to the successful probe's answer. Rejects after `timeoutMs`.
 */
export async function waitFor(
  probe: () => Promise<boolean>,
  what: string,
  options: { timeoutMs?: number; intervalMs?: number; since?: number } = {},
): Promise<number> {
  const since = options.since ?? performance.now()
  const deadline = performance.now() + (options.timeoutMs ?? 5000)
  for (;;) {
    if (await probe()) return performance.now() - since
    if (performance.now() > deadline) {
      throw new Error(`${what}: not true after ${options.timeoutMs ?? 5000} ms`)
    }
    await sleep(options.intervalMs ?? 20)
  }
}

/** Median and maximum of a list of numbers. */
export function summarize(values: readonly number[]): { median: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  const median =
    sorted.length % 2 === 1
      ? (sorted[middle] as number)
      : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
  return { median, max: sorted[sorted.length - 1] as number }
}
