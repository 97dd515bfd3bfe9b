import type { Config } from '../config/schema.ts'
import { type AuthenticateMaybeSync, createMaybeSyncAuthenticator } from '../core/authenticate.ts'
import type { JwtRevocationSet } from '../core/jwt-revocations.ts'
import type { Clock } from '../core/ports.ts'
import { webhookConfigured } from '../events/start.ts'
import { openAuditSpool, recoverAuditSpool } from '../stores/audit-spool.ts'
import { createCachedLookups } from '../stores/cached-lookups.ts'
import type { Store, StoreChange } from '../stores/store.ts'
import { createAuditWriter, createPatUseRecorder } from '../stores/write-behind.ts'
import {
  createStoreWriteHealth,
  type StoreWriteHealth,
  trackStoreWrites,
} from '../stores/write-health.ts'
import { createIssuerRegistry, type IssuerRegistry } from './issuer-registry.ts'
import { createJwtRevocationFeed } from './jwt-revocation-feed.ts'
import type { Tracing } from './tracing.ts'

export interface AuthContext {
  readonly store: Store
  /** Answers cache hits synchronously: callers take a value or a promise. */
  readonly authenticate: AuthenticateMaybeSync
  readonly lookups: ReturnType<typeof createCachedLookups>
  readonly issuers: IssuerRegistry
  /** The JWT revocation rules in force here (also for the admin listener's operator JWTs). */
  readonly revocations: JwtRevocationSet
  readonly patUse: ReturnType<typeof createPatUseRecorder>
  readonly audit: ReturnType<typeof createAuditWriter>
  readonly clock: Clock
  /**
   * Since when (epoch ms) the JWT revocation rules cannot be read, the rules read before
   * staying in force; null while they are read (/readyz: `jwtRevocations`).
   */
  jwtRevocationsStaleSince(): number | null
  /**
   * Whether everything the change log delivered is applied: no issuer or JWT revocation
   * rule read still running (they follow the read that names them). A proxy may keep a
   * JWT's allow only then (decision/cache-expiry.ts).
   */
  changesSettled(): boolean
  /** Whether the store's writes succeed (disk trouble: /readyz, metrics, one log line). */
  readonly writes: StoreWriteHealth
  /** Stops watching, flushes last-used times and audit events. */
  close(): Promise<void>
}

export interface Warn {
  warn(obj: object, msg: string): void
  error(obj: object, msg: string): void
}

/**
 * Wires the core to a store: cached lookups, the issuer registry, write-behind of last-used
 * times and audit events, and cache invalidation from the store's change feed.
 */
export async function createAuthContext(
  config: Readonly<Config>,
  store: Store,
  clock: Clock,
  log: Warn,
  options: {
    /**
     * Where audit events are spooled until stored (audit-spool.ts), so that a killed process
     * loses none; the server gives `<dataDir>/audit-spool`. Omitted: memory only.
     */
    readonly auditSpoolDir?: string | undefined
    /** With `tracing.enabled`: store lookups and JWKS fetches in spans (tracing.ts). */
    readonly tracing?: Pick<Tracing, 'lookups' | 'fetch'> | undefined
    /** The data directory: its free space is watched and it holds the disk reserve. */
    readonly dataDir?: string | undefined
  } = {},
): Promise<AuthContext> {
  const { tracing } = options
  // Failed write-behind writes are one episode with one log line (write-health.ts), not a
  // warning per flush; what they carry waits in the spool and in memory.
  const writes = createStoreWriteHealth({
    log,
    dataDir: options.dataDir,
    reserve: store.kind === 'sqlite',
  })
  const written = trackStoreWrites(store, writes)
  const lookups = createCachedLookups(tracing ? tracing.lookups(store) : store, {
    ttlMs: config.auth.lookupCacheTtlMs,
    maxEntries: config.auth.lookupCacheMaxEntries,
    tenantStaleIfErrorMs: config.auth.tenantStaleIfErrorMs,
    clock,
  })
  // Read once the change log is watched (below), before the first token is verified.
  const revocations = createJwtRevocationFeed(store, clock, (error) =>
    log.warn(
      { err: error },
      'reading JWT revocation rules failed; the rules read before stay in force, retried every second',
    ),
  )
  const issuers = await createIssuerRegistry(
    store,
    {
      clock,
      revocations: revocations.rules,
      clockToleranceSec: config.auth.clockToleranceSec,
      maxLifetimeSec: config.auth.maxJwtLifetimeSec,
      cacheMaxEntries: config.auth.jwtCacheMaxEntries,
      fetch: tracing?.fetch,
      // One line per key set load that skipped keys, never per token (jwks.ts).
      onSkippedKeys: (issuer, skippedKeys) =>
        log.warn(
          { issuer, skippedKeys },
          "trusted issuer's JWKS has keys that cannot be used: tokens signed with them get 401 (check the key or --algorithms)",
        ),
      jwks: {
        timeoutMs: config.auth.jwksTimeoutMs,
        cooldownMs: config.auth.jwksCooldownMs,
        cacheMaxAgeMs: config.auth.jwksCacheMaxAgeMs,
        staleWhileErrorMs: config.auth.jwksStaleMaxMs,
      },
    },
    (error) =>
      log.warn(
        { err: error },
        'reloading trusted issuers failed; the previous set stays in force, retried every second (/readyz: issuers.reloadFailing)',
      ),
    (issuer, error) =>
      log.error(
        { issuer, err: { message: error.message } },
        'trusted issuer refused: its tokens get 503 until its configuration is fixed (tokengate issuer add --issuer ISS ...)',
      ),
    (issuer, reason) =>
      log.error(
        { issuer, reason },
        "trusted issuer's shared secret cannot be opened on this instance: its tokens get 503 until secretKeyFile (TOKENGATE_SECRET_KEY_FILE) names the key it was sealed with",
      ),
  )

  let issuerReloads = 0
  const reloadIssuers = () => {
    issuerReloads++
    void issuers.reload().finally(() => issuerReloads--)
  }
  const unwatch = store.watch((change: StoreChange) => {
    switch (change.kind) {
      case 'pat_changed':
        lookups.invalidatePat(change.tokenHash)
        break
      case 'tenant_changed':
        lookups.invalidateTenant(change.id)
        break
      case 'issuers_changed':
        reloadIssuers()
        break
      case 'jwt_revocation_changed':
        revocations.changed(change.id)
        break
      case 'policy_changed':
        // The gateway's policy follows the store itself (gateway/policy-reload.ts).
        break
      default:
        // 'resync' (and any kind added later): changes may have been missed, so nothing
        // cached can be trusted any more. Only the last-known tenants survive: they are
        // served solely while the store is failing, so that JWTs keep working through a
        // Postgres outage (the change log becomes unreadable exactly then); PATs then fail
        // closed. See cached-lookups.ts.
        lookups.resync()
        reloadIssuers()
        void revocations.reload()
    }
  })

  // After the watch: the rules and the change log's head are read in one snapshot and the
  // changes after that head are delivered here (jwt-revocation-feed.ts), so a rule written
  // at any moment of this start is in force.
  await revocations.reload()

  const patUse = createPatUseRecorder(written, {
    flushIntervalMs: 1000,
    // Last-used times to the minute (docs/cli.md): one store write per busy token a minute,
    // not one per token per flush.
    resolutionMs: 60_000,
    clock,
    onError: (error) => writes.failed('recordPatUse', error),
  })
  // Events a killed process (a worker SIGKILLed between two flushes) left in its spool are
  // stored first; a store that cannot take them now leaves them for the next start.
  const spoolDir = options.auditSpoolDir
  // The outbox has readers: the webhook, or CAEP receivers (their entries are queued per type).
  const queueForWebhook = webhookConfigured(config.events)
  const queueForDelivery = queueForWebhook || (config.ssf.transmitter?.receivers.length ?? 0) > 0
  const recoverSpool = spoolDir
    ? async () => {
        const { recovered, unreadable } = await recoverAuditSpool(spoolDir, store, {
          queue: queueForDelivery,
          webhook: queueForWebhook,
          now: () => clock.now(),
        })
        if (recovered > 0 || unreadable > 0) {
          log.warn(
            { recovered, unreadable },
            'audit events of a killed process recovered from its spool',
          )
        }
      }
    : undefined
  // Refused now: tried again by the audit writer after its next flush that stores.
  let recoverSpoolLater: (() => Promise<void>) | undefined
  try {
    await recoverSpool?.()
  } catch (error) {
    log.warn(
      { err: error },
      'audit spool of a killed process not recovered yet; tried again once a flush stores',
    )
    recoverSpoolLater = recoverSpool
  }
  const audit = createAuditWriter(written, {
    flushIntervalMs: 200,
    maxBatch: 500,
    spool: spoolDir ? openAuditSpool(spoolDir) : undefined,
    recoverSpool: recoverSpoolLater,
    // Without a webhook or a CAEP receiver nothing reads the outbox: store the events only.
    queueForDelivery,
    queueForWebhook,
    clock,
    onError: (error) => writes.failed('appendAudit', error),
  })
  const authenticate = createMaybeSyncAuthenticator({
    lookups: lookups.maybeSync,
    jwt: issuers,
    clock,
  })

  return {
    store,
    authenticate,
    lookups,
    issuers,
    revocations: revocations.rules,
    jwtRevocationsStaleSince: () => revocations.failingSince(),
    changesSettled: () => issuerReloads === 0 && !issuers.reloadFailing() && revocations.settled(),
    patUse,
    audit,
    clock,
    writes,
    async close() {
      unwatch()
      writes.close()
      await Promise.allSettled([patUse.close(), audit.close()])
      issuers.close()
      revocations.close()
    },
  }
}
