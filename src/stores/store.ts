import type { IssuerConfig } from '../core/issuer.ts'
import type { JwtRevocationRule } from '../core/jwt-revocations.ts'
import type { PatRecord, RateLimitOverride, Tenant } from '../core/ports.ts'

/** Keyset pagination: `cursor` is opaque to callers; `nextCursor` is null on the last page. */
export interface PageRequest {
  readonly limit: number
  readonly cursor?: string | undefined
}
export interface Page<T> {
  readonly items: readonly T[]
  readonly nextCursor: string | null
}

/**
 * One security-relevant event as stored: an `AuditEvent` of auth/audit-events.ts with its id,
 * time, actor, client address and request id. A stable schema: fields are added, never renamed.
 */
export interface StoredAuditEvent {
  readonly id: string
  /** Epoch milliseconds. */
  readonly time: number
  /** e.g. `auth.failed`, `pat.issued`, `pat.revoked`, `tenant.created`, `issuer.added`. */
  readonly type: string
  readonly tenantId: string | null
  /** Log-safe fingerprint of the actor's token, or `cli:<user>` for operator actions. */
  readonly actor: string | null
  /** Outcome code: `ok`, or a failure code such as `invalid_token`. */
  readonly outcome: string
  readonly clientAddress: string | null
  readonly requestId: string | null
  /** Extra, event-specific, log-safe data (never a token). */
  readonly details: Readonly<Record<string, unknown>>
}

export interface AppendAuditOptions {
  /**
   * Whether the events are queued for webhook delivery. Default true: a caller that cannot
   * tell whether delivery is configured (the CLI) queues, and a start without a webhook
   * empties the outbox (see `startEventDelivery`).
   */
  readonly queue?: boolean | undefined
  /**
   * With `queue`: whether the webhook's queue (`''`) gets them too, besides the destinations
   * (CAEP receivers). Default true; false when only receivers read the outbox, so that a flood
   * of audited 401s queues nothing nobody reads.
   */
  readonly webhook?: boolean | undefined
}

/** An audit event waiting in the delivery outbox. */
export interface OutboxEntry {
  readonly event: StoredAuditEvent
  /** Failed delivery attempts so far. */
  readonly attempts: number
}

export interface OutboxStats {
  readonly pending: number
  /** `time` of the oldest waiting event, or null when none waits. */
  readonly oldestTime: number | null
}

export interface StoredIssuer extends IssuerConfig {
  readonly createdAt: number
}

/**
 * Changes other components cache, delivered to `watch` listeners in change-log order: what
 * this store object wrote before its method resolves, other processes' changes within the
 * poll interval (sooner when NOTIFY wakes the follower). See change-log.ts.
 */
export type StoreChange =
  | { readonly kind: 'pat_changed'; readonly tokenHash: string }
  | { readonly kind: 'tenant_changed'; readonly id: string }
  | { readonly kind: 'issuers_changed' }
  /** The stored gateway policy named `name` was written or removed. */
  | { readonly kind: 'policy_changed'; readonly name: string }
  /** A JWT revocation rule was written or removed (expired ones are deleted too). */
  | { readonly kind: 'jwt_revocation_changed'; readonly id: string }
  /**
   * Changes may have been missed (the change log could not be read, or entries this process
   * never applied were pruned): drop every cache.
   */
  | { readonly kind: 'resync' }

export class ConflictError extends Error {
  override readonly name = 'ConflictError'
}

/** State of change delivery, for health checks, metrics and tests. */
export interface ChangeFeedStatus {
  /** True while a Postgres LISTEN connection is up (a wake-up only: see change-log.ts). */
  readonly connected: boolean
  /** Server pid of the listening connection, when connected. */
  readonly backendPid: number | undefined
  /**
   * Whether notifications reach the LISTEN connection (false behind PgBouncer in transaction
   * pooling: changes then arrive by the poll only); undefined until checked.
   */
  readonly delivering?: boolean | undefined
  /** The last change-log sequence number applied, once known. */
  readonly lastSeq?: number | undefined
  /** False while the change log cannot be read (caches were dropped; PATs fail closed). */
  readonly current?: boolean | undefined
}

export interface TenantStore {
  findTenant(id: string): Promise<Tenant | undefined>
  /** Throws ConflictError when the id exists. */
  createTenant(tenant: { id: string; name: string }, at: number): Promise<Tenant>
  listTenants(): Promise<readonly Tenant[]>
  /** Returns the updated tenant, or undefined when it does not exist. */
  setTenantEnabled(id: string, enabled: boolean): Promise<Tenant | undefined>
  /**
   * Changes a tenant's name or rate limit, atomically: the tenant before and after, or
   * undefined (nothing written) when it does not exist. Emits `tenant_changed`.
   */
  updateTenant(id: string, changes: TenantChanges): Promise<Changed<Tenant> | undefined>
}

/** A record as it was just before a change, and as the change left it. */
export interface Changed<T> {
  readonly before: T
  readonly after: T
}

/** What an operator may change of a tenant; an undefined field stays as it is. */
export interface TenantChanges {
  readonly name?: string | undefined
  /** null: back to the configured default. */
  readonly rateLimit?: RateLimitOverride | null | undefined
}

/** What an operator may change of a PAT; an undefined field stays as it is, null clears it. */
export type PatChanges = {
  readonly [K in
    | 'name'
    | 'permissions'
    | 'expiresAt'
    | 'disabledAt'
    | 'rateLimit'
    | 'quota'
    | 'metadata'
    | 'externalId'
    | 'certificateThumbprint']?: PatRecord[K] | undefined
}

/** PATs, stored by the SHA-256 of the token only. */
export interface PatStore {
  /** The PAT with this token hash (lowercase hex SHA-256), if any. */
  findPatByHash(tokenHash: string): Promise<PatRecord | undefined>
  /** Throws ConflictError on a duplicate id or hash. */
  insertPat(record: PatRecord): Promise<void>
  getPat(id: string): Promise<PatRecord | undefined>
  /** Newest first. `expiringBefore` (epoch ms) keeps only unrevoked tokens expiring before it. */
  listPats(
    tenantId: string,
    page: PageRequest,
    filter?: { expiringBefore?: number },
  ): Promise<Page<PatRecord>>
  /** Idempotent: the first revocation time is kept. Undefined when the id does not exist. */
  revokePat(id: string, at: number): Promise<PatRecord | undefined>
  /** Write-behind of last-used times: id -> epoch ms; only ever moves a time forward. */
  recordPatUse(uses: ReadonlyMap<string, number>): Promise<void>
  /**
   * Changes an unrevoked token, atomically: the record before and after, or undefined
   * (nothing written) when the id is unknown or the token is revoked. Emits `pat_changed`.
   */
  updatePat(id: string, changes: PatChanges): Promise<Changed<PatRecord> | undefined>
  /**
   * Rotation, atomically: inserts `replacement` (whose `rotatedFrom` must be `oldId`) and
   * marks the old token superseded at `at`, working until `graceUntil` (= `at` for none).
   * Returns the updated old record; undefined (and nothing written) when the old token does
   * not exist, is revoked, or was already rotated. Emits `pat_changed` for the old token.
   */
  rotatePat(
    oldId: string,
    replacement: PatRecord,
    at: number,
    graceUntil: number,
  ): Promise<PatRecord | undefined>
  /**
   * Revokes every unrevoked token of `id`'s rotation family (all tokens linked to it by
   * `rotatedFrom`, in both directions) at `at`. Returns the tokens revoked by THIS call
   * (empty when all were already revoked or the id is unknown), so that concurrent callers
   * can tell who did it. Emits `pat_changed` for each.
   */
  revokePatFamily(id: string, at: number): Promise<readonly PatRecord[]>
  /**
   * Every token of `id`'s rotation family (linked to it by `rotatedFrom`, in both
   * directions), revoked ones included, oldest first; empty when the id is unknown.
   */
  listPatFamily(id: string): Promise<readonly PatRecord[]>
}

export interface IssuerStore {
  /** Insert or replace by `issuer`. */
  putIssuer(issuer: IssuerConfig, at: number): Promise<void>
  listIssuers(): Promise<readonly StoredIssuer[]>
  removeIssuer(issuer: string): Promise<boolean>
}

/** JWT revocation rules (core/jwt-revocations.ts); each write is in the change log. */
export interface JwtRevocationStore {
  /**
   * Stores a rule. One per (issuer, kind, value): storing the same again keeps the stored
   * rule's id and widens it (the later `issuedBefore` and `expiresAt`). Returns the stored rule.
   */
  putJwtRevocation(rule: JwtRevocationRule): Promise<JwtRevocationRule>
  getJwtRevocation(id: string): Promise<JwtRevocationRule | undefined>
  /** The rules not yet expired at `now`, oldest first. */
  listJwtRevocations(now: number): Promise<readonly JwtRevocationRule[]>
  /**
   * The same, with the change log's head read in the same snapshot: every rule change logged
   * up to `head` is in `rules` (follow the log from `head` with `followChangesFrom`).
   */
  snapshotJwtRevocations(
    now: number,
  ): Promise<{ readonly rules: readonly JwtRevocationRule[]; readonly head: number }>
  removeJwtRevocation(id: string): Promise<boolean>
  /** Deletes at most `limit` rules that expired at or before `before`; how many. */
  pruneJwtRevocations(before: number, limit: number): Promise<number>
}

/** Security Event Tokens received from CAEP/SSF transmitters, for replay checks (ssf/). */
export interface SsfReceivedStore {
  /**
   * Records `transmitter`'s SET `jti`; true when no instance recorded it before, false for a
   * replay. Kept until `expiresAt` (epoch ms), then pruned.
   */
  recordSsfReceived(
    transmitter: string,
    jti: string,
    receivedAt: number,
    expiresAt: number,
  ): Promise<boolean>
  /** Drops a record whose SET could not be applied: its next delivery is then not a replay. */
  forgetSsfReceived(transmitter: string, jti: string): Promise<void>
  /** Deletes at most `limit` records that expired at or before `before`; how many. */
  pruneSsfReceived(before: number, limit: number): Promise<number>
}

/** A stored route policy: its YAML/JSON text, as `parsePolicy` reads it. */
export interface StoredPolicy {
  readonly name: string
  readonly text: string
  readonly updatedAt: number
}

/** Route policies kept in the store (`gateway.policyStore`), by name (`gateway`). */
export interface PolicyStore {
  getPolicy(name: string): Promise<StoredPolicy | undefined>
  /** Insert or replace; watchers everywhere get `policy_changed`. */
  putPolicy(name: string, text: string, at: number): Promise<void>
  /** False when there was none. */
  removePolicy(name: string): Promise<boolean>
}

export interface AuditStore {
  /**
   * Stores the events. With `queue` (the default), each one not already stored is also
   * queued in the delivery outbox, in the same transaction (an event is queued exactly once,
   * when it is first stored). `queue: false` stores only: for callers that know no webhook
   * is configured, so the outbox has no reader and queuing would be work thrown away.
   */
  appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions): Promise<void>
  /** Newest first. */
  listAudit(tenantId: string, page: PageRequest): Promise<Page<StoredAuditEvent>>
  /**
   * Deletes up to `limit` events older than `before` (epoch ms), oldest first, except those
   * still waiting in the delivery outbox; returns how many. Retention calls it in a loop.
   */
  pruneAudit(before: number, limit: number): Promise<number>
}

/** A quota counter's state in the store. */
export interface QuotaCount {
  /** Start of the period counted (epoch ms; 0 without refill). */
  readonly periodStart: number
  /** Uses reserved in that period, by every instance. */
  readonly used: number
}

/**
 * What one reservation granted, and where: the period and the counter's generation (moved on
 * by every `resetQuota`), which a release of its unspent uses must name.
 */
export interface QuotaReservation extends QuotaCount {
  readonly granted: number
  readonly generation: number
}

/**
 * Quota counts, shared by every instance and process: each instance reserves uses in blocks
 * (`reserveQuota`), so the request path pays a store round trip once per block.
 */
export interface QuotaStore {
  /**
   * Atomically reserves up to `want` uses of `counter` in the period starting at
   * `periodStart`, never beyond `limit` uses in that period. A later period starts the count
   * again. Returns what was granted (0 when exhausted) and the count after it.
   */
  reserveQuota(
    counter: string,
    periodStart: number,
    limit: number,
    want: number,
  ): Promise<QuotaReservation>
  /**
   * Gives back `count` reserved but unused uses (a graceful shutdown) of the period and
   * generation a reservation returned; nothing when the counter has moved on to another
   * period or generation since (a reset's new count is never lowered by older uses).
   */
  releaseQuota(
    counter: string,
    periodStart: number,
    generation: number,
    count: number,
  ): Promise<void>
  /** The stored counts of these counters (absent: never used). */
  readQuota(counters: readonly string[]): Promise<ReadonlyMap<string, QuotaCount>>
  /**
   * Forgets a counter's uses: its quota starts again from zero, in a new generation, so that
   * releases of uses reserved before it change nothing.
   */
  resetQuota(counter: string): Promise<void>
}

/** Usage is counted per key (PAT id), per tenant, and in all (subject ''). */
export type UsageScope = 'key' | 'tenant' | 'all'
export type UsageResolution = 'minute' | 'hour' | 'day'

/** Requests of one bucket by outcome. */
export interface UsageCounts {
  readonly allowed: number
  /** 401 */
  readonly unauthorized: number
  /** 403 */
  readonly forbidden: number
  /** 429: a rate limit or an exhausted quota. */
  readonly limited: number
}

/** One bucket of one subject: what the write-behind adds and what reads return. */
export interface UsageRow extends UsageCounts {
  readonly scope: UsageScope
  readonly subject: string
  readonly resolution: UsageResolution
  /** Epoch ms. */
  readonly bucketStart: number
  /** The key's tenant (scope `key`), else null. */
  readonly tenantId: string | null
}

/** A batch of usage rows, encoded as `addUsage`'s statement reads them (usage-batch.ts). */
export interface UsageBatch {
  readonly rows: number
  readonly text: string
}

/** Rows given as objects, or already encoded. */
export type UsageRows = readonly UsageRow[] | UsageBatch

/** A series of one subject; `since` inclusive, `until` exclusive (epoch ms). */
export interface UsageQuery {
  readonly scope: UsageScope
  readonly subject: string
  readonly resolution: UsageResolution
  readonly since: number
  readonly until: number
}

export interface AddUsageOptions {
  /** A write's identity: applied at most once (the usage journal's slices). */
  readonly mark?: string | undefined
}

/** Request counts, cluster-wide, added to by every instance (the usage write-behind). */
export interface UsageStore {
  /**
   * Adds each row's counts to its bucket (rows must name distinct buckets; given as objects,
   * or encoded as the usage flush writes them: usage-batch.ts). With `mark`, at
   * most once per mark: the mark is recorded in the same transaction, and rows arriving under
   * a mark already recorded are skipped (a usage journal's replay, usage-journal.ts).
   */
  addUsage(rows: UsageRows, options?: AddUsageOptions): Promise<void>
  /** The buckets of one subject that have counts, oldest first. */
  readUsage(query: UsageQuery): Promise<readonly UsageRow[]>
  /** A tenant's keys by requests in a time range, busiest first. */
  topKeys(
    tenantId: string,
    resolution: UsageResolution,
    since: number,
    until: number,
    limit: number,
  ): Promise<readonly (UsageCounts & { readonly tokenId: string; readonly tenantId: string })[]>
  /** Deletes up to `limit` buckets of `resolution` that start before `before`; returns how many. */
  pruneUsage(resolution: UsageResolution, before: number, limit: number): Promise<number>
}

/**
 * A destination of the outbox besides the webhook (whose name is `''`): a CAEP receiver.
 * `appendAudit` queues an entry for it for each event of one of `eventTypes`.
 */
export interface OutboxDestination {
  readonly name: string
  readonly eventTypes: readonly string[]
}

/**
 * The delivery outbox, filled by `appendAudit`: one queue per destination, `''` (the
 * default) being the webhook's, each claimed, retried and completed on its own.
 */
export interface OutboxStore {
  /**
   * Claims up to `limit` due outbox entries of `destination`, oldest first, for `leaseMs`:
   * until the lease ends no other claim (in any process) returns them. Due: `nextAttemptAt <=
   * now` and not claimed, or the claim expired (a worker that died mid-delivery).
   */
  claimOutbox(
    now: number,
    limit: number,
    leaseMs: number,
    destination?: string,
  ): Promise<readonly OutboxEntry[]>
  /** Delivered: removes the entries of `destination` (unknown ids are ignored). */
  completeOutbox(eventIds: readonly string[], destination?: string): Promise<void>
  /** Delivery failed: releases the claim, counts the attempt and sets the next one. */
  retryOutbox(
    eventIds: readonly string[],
    nextAttemptAt: number,
    error: string,
    destination?: string,
  ): Promise<void>
  /** Entries waiting for delivery (every destination), and the time of the oldest one's event. */
  outboxStats(): Promise<OutboxStats>
  /** Empties the webhook's queue (no webhook configured); returns how many were removed. */
  clearOutbox(): Promise<number>
  /**
   * Replaces the destinations besides the webhook; one no longer listed loses its pending
   * entries. Every instance on one database must configure the same ones.
   */
  setOutboxDestinations(list: readonly OutboxDestination[]): Promise<void>
}

export interface ChangeSource {
  /** Subscribe to changes made through any connection to this store; returns unsubscribe. */
  watch(listener: (change: StoreChange) => void): () => void
  /**
   * Delivers every change logged after `seq` to the watchers, again when this process had
   * already read past it: for a snapshot taken as of `seq` (snapshotJwtRevocations), whose
   * later changes must not be lost to a follower that started after it.
   */
  followChangesFrom?(seq: number): Promise<void>
  /** State of change delivery (the change log follower, and Postgres' LISTEN connection). */
  readonly changeFeed?: ChangeFeedStatus | undefined
  /** Epoch ms up to which every change has been applied here (change-log.ts `readAsOf`). */
  readonly changesReadAsOf?: number | undefined
  /** Reads the change log now instead of at the next poll (moves `changesReadAsOf`). */
  catchUpChanges?(): Promise<void>
}

/**
 * What one transaction can do (`Store.transaction`): the reads and writes of the operations
 * that change tenants, tokens, issuers and policies, and their audit events.
 */
export type StoreTransaction = TenantStore &
  PatStore &
  IssuerStore &
  PolicyStore &
  Pick<AuditStore, 'appendAudit'> &
  Pick<QuotaStore, 'resetQuota' | 'readQuota'>

export interface TransactionalStore {
  /**
   * Runs `work` in one transaction: what it writes through `tx` is committed together when
   * it resolves, and nothing of it when it rejects, the store failing or going away mid-way
   * included (the work's error, or the store's, is rethrown). Watchers get the changes once
   * committed. Other calls on the store are not part of it and never see it uncommitted; on
   * Postgres it holds the change log's lock, so other changes wait for it: keep it short.
   * A call that fails inside the work fails the transaction: let its error propagate (on
   * Postgres every later call in it fails too). `tx` must not be used after `work` settles.
   *
   * @example
   *   await store.transaction(async (tx) => {
   *     await tx.createTenant({ id: 'acme', name: 'Acme' }, now)
   *     await tx.putIssuer(issuer, now)
   *   })
   */
  transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T>
}

/**
 * Persistence for tenants, PATs (hashed), trusted issuers and audit events: one object per
 * backend playing every role (and the core's `AuthLookups`). Callers depend on the roles they use. Every backend (SQLite,
 * Postgres) passes `test/stores/contract.ts`. Methods throw when the backend is
 * unreachable; callers on the request path turn that into 503.
 */
export interface Store
  extends TenantStore,
    PatStore,
    IssuerStore,
    AuditStore,
    OutboxStore,
    PolicyStore,
    QuotaStore,
    UsageStore,
    JwtRevocationStore,
    SsfReceivedStore,
    ChangeSource,
    TransactionalStore {
  readonly kind: 'sqlite' | 'postgres'
  /** Admin tokens and cross-tenant operator searches (the admin API). */
  readonly admin: AdminStore
  /** Applies pending migrations; returns the versions applied now. */
  migrate(): Promise<number[]>
  /** Resolves when the backend answers a trivial query; throws otherwise. */
  ping(): Promise<void>
  close(): Promise<void>
}

/** Programming errors in a rotation request: thrown before anything is written. */
export function checkReplacement(
  oldId: string,
  replacement: PatRecord,
  at: number,
  graceUntil: number,
): void {
  if (replacement.rotatedFrom !== oldId) {
    throw new RangeError('rotatePat: the replacement must have rotatedFrom = the old id')
  }
  if (!Number.isFinite(at) || !Number.isFinite(graceUntil) || graceUntil < at) {
    throw new RangeError('rotatePat: graceUntil must be a time at or after `at`')
  }
}

/** An operator role on the admin API and console. */
export type AdminRole = 'read-only' | 'operator'

/** A stored admin token: its SHA-256 only, never the token (`tga_...`). */
export interface AdminTokenRecord {
  readonly id: string
  /** Lowercase hex SHA-256 of the whole token. */
  readonly tokenHash: string
  /** Who the token belongs to; recorded as the actor (`admin:<name>`) on audit events. */
  readonly name: string
  readonly role: AdminRole
  readonly last4: string
  readonly createdAt: number
  readonly expiresAt: number
  readonly revokedAt: number | null
}

/** Cross-tenant PAT search for operators; every field narrows, none is required. */
export interface PatSearch {
  readonly tenantId?: string | undefined
  /** Substring of the subject (case-insensitive for ASCII). */
  readonly subject?: string | undefined
  /** Substring of the name (case-insensitive for ASCII). */
  readonly name?: string | undefined
  readonly last4?: string | undefined
  /** Exactly this external id. */
  readonly externalId?: string | undefined
  /** Unrevoked tokens expiring before this time (epoch ms). */
  readonly expiringBefore?: number | undefined
}

/** Cross-tenant audit search; times are epoch ms, `since` inclusive, `until` exclusive. */
export interface AuditSearch {
  readonly tenantId?: string | undefined
  readonly type?: string | undefined
  readonly actor?: string | undefined
  readonly since?: number | undefined
  readonly until?: number | undefined
}

/**
 * What the admin API needs from a store beyond `Store`: admin tokens (migration 6),
 * operator searches across tenants and console sessions; written once for both backends
 * (`sql/operators.ts`).
 */
export interface AdminStore {
  /** Throws ConflictError on a duplicate id or hash. */
  insertAdminToken(record: AdminTokenRecord): Promise<void>
  findAdminTokenByHash(tokenHash: string): Promise<AdminTokenRecord | undefined>
  /** Newest first. */
  listAdminTokens(): Promise<readonly AdminTokenRecord[]>
  /** Idempotent (the first time is kept); undefined when the id does not exist. */
  revokeAdminToken(id: string, at: number): Promise<AdminTokenRecord | undefined>
  /** Newest first, keyset-paginated like `listPats`. */
  searchPats(search: PatSearch, page: PageRequest): Promise<Page<PatRecord>>
  /** Newest first, keyset-paginated like `listAudit`. */
  searchAudit(search: AuditSearch, page: PageRequest): Promise<Page<StoredAuditEvent>>
  /**
   * Stores a console session. First removes ended ones (expired, or unused since
   * `staleBefore`), the credential's oldest beyond `perCredential - 1`, and the oldest of all
   * beyond `total - 1`, so neither one credential nor many can grow the table without bound.
   */
  insertSession(
    record: ConsoleSessionRecord,
    limits: { perCredential: number; total: number; now: number; staleBefore: number },
  ): Promise<void>
  findSession(idHash: string): Promise<ConsoleSessionRecord | undefined>
  /** Changes the fields given; a field set to null is cleared. */
  updateSession(
    idHash: string,
    changes: { lastSeen?: number; flash?: string | null; notice?: string | null },
  ): Promise<void>
  deleteSession(idHash: string): Promise<void>
}

/** A console session as stored (admin/sessions.ts): never the cookie, only its SHA-256. */
export interface ConsoleSessionRecord {
  /** Lowercase hex SHA-256 of the cookie value. */
  readonly idHash: string
  /** What the operator signed in with: the admin token's hash, or the SSO actor. */
  readonly credential: string
  readonly operator: {
    readonly actor: string
    readonly role: AdminRole
    readonly expiresAt: number
    readonly adminTokenHash: string | undefined
    /** The claims of the operator JWT signed in with (JWT revocation rules), never the token. */
    readonly jwt?:
      | {
          readonly issuer: string
          readonly subject: string
          readonly tenantId: string
          readonly tokenId: string | undefined
          readonly expiresAt: number
          readonly issuedAt?: number | undefined
          readonly sessionId?: string | undefined
        }
      | undefined
  }
  readonly csrf: string
  readonly createdAt: number
  readonly expiresAt: number
  readonly lastSeen: number
  /** Sealed with a key only the cookie gives (admin/sessions.ts). */
  readonly flash: string | null
  /** A one-shot message for the next page, JSON. */
  readonly notice: string | null
}
