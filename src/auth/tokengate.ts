/**
 * `createTokengate`: the whole product as a library. It opens the same store the server and
 * the CLI use (the embedded SQLite file in `dataDir`, or Postgres with `databaseUrl`) and
 * wires it exactly as `tokengate serve` does: cached PAT and tenant lookups, the store's
 * change feed (a `tokengate pat revoke` reaches the app within a second), trusted issuers
 * from the store, last-used times written behind, audit events of refused requests, and
 * rotation-reuse detection. The result plugs into every adapter:
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
import { type AuthenticateMaybeSync, isPromiseLike } from '../core/authenticate.ts'
import { parseAuthorization } from '../core/credentials.ts'
import type { AuthFailure } from '../core/failure.ts'
import { fingerprintToken } from '../core/fingerprint.ts'
import { type Clock, systemClock } from '../core/ports.ts'
import type { AuthResult, Principal } from '../core/principal.ts'
import { missingPackageError } from '../missing-package.ts'
import { openStore } from '../stores/open-store.ts'
import type { Store } from '../stores/store.ts'
import { authFailureRecord } from './audit-events.ts'
import { createAuthContext, type Warn } from './auth-context.ts'
import { createReuseDetector } from './reuse-detector.ts'

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
  /** Warnings (store or issuer reload failures, retried writes). Default `process.emitWarning`. */
  readonly log?: Warn
  readonly clock?: Clock
}

/** Where a refused request came from, for its audit event. */
export interface FailureContext {
  readonly requestId: string
  readonly clientAddress?: string | null | undefined
  readonly method?: string | undefined
  /** The path without the query string. */
  readonly path?: string | undefined
  /** The request's `Authorization` header lines (only a fingerprint is ever stored). */
  readonly authorization?: readonly string[] | undefined
  /** Set for a 403: the caller was authenticated. */
  readonly principal?: Principal | null | undefined
}

export interface Tokengate {
  /**
   * The server's own authentication pipeline: answers cache hits synchronously (a value),
   * otherwise a promise; never rejects. A PAT's successful use is recorded (last-used time).
   */
  readonly authenticate: AuthenticateMaybeSync
  /** Audits a refused request (401/403) as the server does; the adapters call it. */
  recordFailure(failure: AuthFailure, context: FailureContext): void
  /** The opened store (tenants, PATs, issuers, audit), e.g. to issue tokens in code. */
  readonly store: Store
  /** Stops watching the store, flushes last-used times and audit events, closes the store. */
  close(): Promise<void>
}

/** Opens the store and wires the auth pipeline around it; see the module comment. */
export async function createTokengate(options: TokengateOptions = {}): Promise<Tokengate> {
  const clock = options.clock ?? systemClock
  const log = options.log ?? emitWarnings
  const config = await libraryConfig(options)
  const store = await openStore(
    config.databaseUrl
      ? { databaseUrl: config.databaseUrl, logger: log }
      : { dataDir: config.dataDir, logger: log },
  ).catch((error: unknown) => {
    throw missingPackageError(error) ?? error
  })
  try {
    if (options.migrate !== false) await store.migrate()
    const auth = await createAuthContext(config, store, clock, log)
    const reuse = createReuseDetector({ store, audit: auth.audit, clock, log })
    const recordUse = (result: AuthResult): AuthResult => {
      if (result.ok && result.principal.tokenType === 'pat' && result.principal.tokenId) {
        auth.patUse.record(result.principal.tokenId, clock.now())
      }
      return result
    }
    let closing: Promise<void> | undefined
    return {
      store,
      authenticate(input) {
        const result = auth.authenticate(input)
        return isPromiseLike(result) ? Promise.resolve(result).then(recordUse) : recordUse(result)
      },
      recordFailure(failure, context) {
        if (failure.code === 'unavailable') return
        const actor = context.principal?.fingerprint ?? actorOf(context.authorization)
        const requestId = context.requestId
        const clientAddress = context.clientAddress ?? null
        const record = authFailureRecord(failure, {
          actor,
          clientAddress,
          requestId,
          method: context.method ?? '',
          url: context.path ?? '',
          tenantId: context.principal?.tenantId ?? null,
        })
        if (record) auth.audit.write(record)
        reuse.onFailure(failure, { actor, clientAddress, requestId })
      },
      close() {
        closing ??= (async () => {
          await reuse.settled()
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
      ...(options.auth ? { auth: { ...options.auth } } : {}),
    },
  })
}

function actorOf(authorization: readonly string[] | undefined): string | null {
  const parsed = parseAuthorization(authorization ?? [])
  return parsed.ok ? fingerprintToken(parsed.token) : null
}

/** A library app has no logger of ours: warnings and errors become process warnings. */
function emitWarning(obj: object, msg: string): void {
  const error = (obj as { err?: unknown }).err
  process.emitWarning(error instanceof Error ? `${msg}: ${error.message}` : msg, 'TokengateWarning')
}

const emitWarnings: Warn = { warn: emitWarning, error: emitWarning }
