/**
 * `createTokengate`: the whole product as a library. It opens the same store the server and
 * the CLI use (the embedded SQLite file in `dataDir`, or Postgres with `databaseUrl`) and
 * wires the same gate as `tokengate serve`: cached PAT and tenant lookups, the store's change
 * feed (a `tokengate pat revoke` reaches the app within a second), trusted issuers from the
 * store, the rate limits, last-used times written behind, audit events of refused requests,
 * and rotation-reuse detection. The result is a gate every framework binding takes:
 *
 * @example
 * import express from 'express'
 * import { createTokengate } from 'tokengate'
 * import { requirePermission, tokengate } from 'tokengate/express'
 * const gate = await createTokengate({ dataDir: '.tokengate' })
 * const app = express()
 * app.use('/api/v1', tokengate(gate))
 * app.get('/api/v1/things', requirePermission('things:read'), (req, res) => {
 *   res.json({ tenant: req.principal?.tenantId })
 * })
 * // on shutdown: await gate.close()
 */
import type { Config } from '../config/schema.ts'
import type { AuthenticateMaybeSync } from '../core/authenticate.ts'
import type { Clock } from '../core/ports.ts'
import { RequestClock } from '../core/request-clock.ts'
import { missingPackageError } from '../missing-package.ts'
import { openStore } from '../stores/open-store.ts'
import type { Store } from '../stores/store.ts'
import { storeAuditSink } from './audit-events.ts'
import { createAuthContext, type Warn } from './auth-context.ts'
import type { Gate } from './gate.ts'
import { openGate } from './open-gate.ts'
import {
  editTenantPat,
  type IssuedPat,
  type IssuePatRequest,
  issueTenantPat,
  type PatEdit,
  type PatEdited,
  type RotatePatRequest,
  rotateTenantPat,
  setPatDisabled,
} from './pat-lifecycle.ts'

export interface TokengateOptions {
  /**
   * The embedded store: the directory holding `tokengate.db` (created with mode 0700), the
   * same directory the CLI's `--data-dir` and the server's `dataDir` name. Default
   * `.tokengate`. Ignored when `databaseUrl` is given.
   */
  readonly dataDir?: string
  /** Postgres instead of SQLite: `postgres://...` (needs the `pg` package installed). */
  readonly databaseUrl?: string
  /** Applies pending store migrations when opening (as `tokengate serve` does). Default true. */
  readonly migrate?: boolean
  /** The server's `auth` settings, same names and defaults (docs/configuration.md). */
  readonly auth?: Partial<Config['auth']>
  /**
   * The server's `rateLimit` settings, same names and defaults (per token, per tenant, failed
   * authentications per address); `{ enabled: false }` turns them off.
   */
  readonly rateLimit?: RateLimitOptions
  /** Redis for rate-limit counters shared by several processes (needs `ioredis`). */
  readonly redisUrl?: string
  /** The server's `pat` settings: default and maximum lifetime of issued tokens. */
  readonly pat?: Partial<Config['pat']>
  /** Warnings (store or issuer reload failures, retried writes). Default `process.emitWarning`. */
  readonly log?: Warn
  /**
   * OpenTelemetry spans, as the server's `tracing.enabled` (docs/tracing.md): each gated
   * request in a `tokengate.request` span with authentication, store lookups and JWKS fetches
   * under it, through `@opentelemetry/api` and the SDK you register. Default false.
   */
  readonly tracing?: boolean
  readonly clock?: Clock
}

type RateLimitOptions = {
  readonly [K in keyof Config['rateLimit']]?: Config['rateLimit'][K] extends object
    ? Partial<Config['rateLimit'][K]>
    : Config['rateLimit'][K]
}

/** Token operations under the operator's policy (`pat` settings), audited as the CLI's. */
export interface PatOperations {
  issue(request: IssuePatRequest): Promise<IssuedPat>
  rotate(request: RotatePatRequest): Promise<IssuedPat & { readonly graceUntil: number }>
  /** Changes a key (name, permissions, expiry, rate limit, quota, metadata, external id). */
  edit(id: string, edit: PatEdit): Promise<PatEdited>
  /** Disables a key without revoking it (401 until enabled), or enables it again. */
  setDisabled(id: string, disabled: boolean): Promise<PatEdited>
}

export interface Tokengate extends Gate {
  /**
   * Authentication alone (no limits, no audit): answers cache hits synchronously (a value),
   * otherwise a promise; never rejects. Front ends use the gate's `check` instead.
   */
  readonly authenticate: AuthenticateMaybeSync
  /** Issue, rotate, edit and disable PATs in code, within the lifetime policy. */
  readonly pats: PatOperations
  /** The opened store (tenants, PATs, issuers, audit). */
  readonly store: Store
  /** Stops watching the store, flushes last-used times and audit events, closes the store. */
  close(): Promise<void>
}

/** Opens the store and wires the gate around it; see the module comment. */
export async function createTokengate(options: TokengateOptions = {}): Promise<Tokengate> {
  // The system clock read once per gated request (core/request-clock.ts); a given clock as is.
  const clock = options.clock ?? new RequestClock()
  const log = options.log ?? emitWarnings
  const config = await libraryConfig(options)
  const store = await openStore(
    config.databaseUrl
      ? { databaseUrl: config.databaseUrl, logger: log }
      : { dataDir: config.dataDir, logger: log, offloadWrites: true },
  ).catch((error: unknown) => {
    throw missingPackageError(error) ?? error
  })
  try {
    if (options.migrate !== false) await store.migrate()
    // Loaded only when on, as the server does: with tracing off nothing of it is loaded.
    const tracing = options.tracing
      ? (await import('./tracing.ts')).createTracing(
          store.kind === 'postgres' ? 'postgresql' : 'sqlite',
        )
      : undefined
    const auth = await createAuthContext(config, store, clock, log, { tracing })
    const opened = await openGate(auth, {
      tracing,
      rateLimit: config.rateLimit,
      quota: config.quota,
      usage: config.usage,
      redisUrl: config.redisUrl,
      log: { ...log, info() {}, isLevelEnabled: () => false },
    })
    const deps = {
      store,
      clock,
      actor: { actor: 'library' },
      audit: storeAuditSink(store, () => clock.now()),
      patPolicy: config.pat,
    }
    let closing: Promise<void> | undefined
    return {
      ...opened.gate,
      authenticate: auth.authenticate,
      pats: {
        issue: (request) => issueTenantPat(deps, request),
        rotate: (request) => rotateTenantPat(deps, request),
        edit: (id, edit) => editTenantPat(deps, id, edit),
        setDisabled: (id, disabled) => setPatDisabled(deps, id, disabled),
      },
      store,
      close() {
        closing ??= (async () => {
          await opened.close()
          await auth.close()
          await store.close()
        })()
        return closing
      },
    }
  } catch (error) {
    await store.close().catch(() => {})
    throw error
  }
}

/** The server's configuration rules and defaults, from the options only (never the environment). */
async function libraryConfig(options: TokengateOptions): Promise<Readonly<Config>> {
  const { loadConfig } = await import('../config/load.ts')
  return loadConfig({
    env: {},
    overrides: {
      // The application owns its listener (and its TLS); only the auth settings apply here.
      server: { plainHttp: true },
      ...(options.dataDir !== undefined ? { dataDir: options.dataDir } : {}),
      ...(options.databaseUrl !== undefined ? { databaseUrl: options.databaseUrl } : {}),
      ...(options.redisUrl !== undefined ? { redisUrl: options.redisUrl } : {}),
      ...(options.auth ? { auth: { ...options.auth } } : {}),
      ...(options.rateLimit ? { rateLimit: { ...options.rateLimit } } : {}),
      ...(options.pat ? { pat: { ...options.pat } } : {}),
    },
  })
}

/** A library app has no logger of ours: warnings and errors become process warnings. */
function emitWarning(obj: object, msg: string): void {
  const error = (obj as { err?: unknown }).err
  process.emitWarning(error instanceof Error ? `${msg}: ${error.message}` : msg, 'TokengateWarning')
}

const emitWarnings: Warn = { warn: emitWarning, error: emitWarning }
