/**
 * The operations both stores share, each area's statements written once (tenants.ts,
 * keys.ts, issuers.ts, audit.ts, …) over the dialect layer (db.ts). A store (sqlite.ts,
 * postgres.ts) supplies its `SqlDb` and what truly differs: connecting, migrating,
 * transactions, notifications and the change feed.
 */
import type { IssuerConfig } from '../../core/issuer.ts'
import type { JwtRevocationRule } from '../../core/jwt-revocations.ts'
import type { PatRecord } from '../../core/ports.ts'
import { ChangeFollower, type ChangeLogReader } from '../change-log.ts'
import type {
  AddUsageOptions,
  AdminStore,
  AppendAuditOptions,
  OutboxDestination,
  PageRequest,
  PatChanges,
  StoreChange,
  StoredAuditEvent,
  TenantChanges,
  UsageQuery,
  UsageResolution,
} from '../store.ts'
import type { UsageRows } from '../usage-batch.ts'
import * as audit from './audit.ts'
import { pruneChanges } from './change-log.ts'
import type { SqlDb } from './db.ts'
import * as issuers from './issuers.ts'
import * as jwtRevocations from './jwt-revocations.ts'
import * as keys from './keys.ts'
import { createAdminStore } from './operators.ts'
import * as ssfReceived from './ssf-received.ts'
import * as tenants from './tenants.ts'
import * as usage from './usage.ts'

export abstract class SqlStore {
  /** The store's database (or, for a transaction's view, that transaction). */
  protected abstract readonly db: SqlDb
  #admin: AdminStore | undefined
  /** Who watches this store (a transaction's view shares its store's). */
  protected listeners = new Set<(change: StoreChange) => void>()
  /** Follows the change log and delivers what it logs to `listeners` (../change-log.ts). */
  protected follower!: ChangeFollower

  protected abstract get closed(): boolean
  /** Reports trouble following the change log, or a watcher that threw. */
  protected abstract warn(obj: { err?: unknown; change?: string }, message: string): void

  /** Starts following the change log through `reader`. */
  protected follow(reader: ChangeLogReader, pollMs: number | undefined): void {
    this.follower = new ChangeFollower({
      reader,
      emit: (change) => this.#emit(change),
      pollMs,
      warn: (obj, message) => this.warn(obj, message),
    })
  }

  /**
   * Changes are delivered in change-log order (../change-log.ts): those made through THIS
   * object before the method that made them resolves; those of other processes and instances
   * within the poll interval (sooner when Postgres' NOTIFY wakes the follower).
   */
  watch(listener: (change: StoreChange) => void): () => void {
    // Wrapped so the same function may subscribe twice and unsubscribe each separately.
    const wrapped = (change: StoreChange) => listener(change)
    this.listeners.add(wrapped)
    if (!this.closed) {
      void this.follower.start().catch(() => {})
      this.follower.poll(true)
    }
    return () => {
      this.listeners.delete(wrapped)
      if (this.listeners.size === 0) this.follower.poll(false)
    }
  }

  /**
   * Epoch ms up to which this process has applied every change (the start of its last
   * successful change-log read); undefined before one or while the log cannot be read.
   */
  get changesReadAsOf(): number | undefined {
    return this.follower.currentAsOf
  }

  /** Reads the change log now (while someone watches), instead of at the next poll. */
  catchUpChanges(): Promise<void> {
    return this.listeners.size > 0 ? this.follower.catchUp() : Promise.resolve()
  }

  /**
   * Delivers every change logged after `seq` (again, when this process is past it) to the
   * watchers: for a reader that took a snapshot as of `seq` (snapshotJwtRevocations).
   */
  followChangesFrom(seq: number): Promise<void> {
    return this.follower.followFrom(seq)
  }

  /** Delivers what this object just wrote (and anything before it) to its watchers. */
  protected async delivered(): Promise<void> {
    if (this.listeners.size > 0) await this.follower.catchUp()
  }

  #emit(change: StoreChange): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(change)
      } catch (error) {
        // A listener's bug must not fail the write that already committed.
        this.warn({ err: error, change: change.kind }, 'store watch listener threw')
      }
    }
  }

  /** Admin tokens, operator searches and console sessions (sql/operators.ts). */
  get admin(): AdminStore {
    this.#admin ??= createAdminStore(this.db)
    return this.#admin
  }

  /** Deletes change-log entries older than `before` (retention); how many. */
  pruneChangeLog(before: number) {
    return pruneChanges(this.db, before)
  }

  // Tenants
  createTenant(tenant: { id: string; name: string }, at: number) {
    return tenants.createTenant(this.db, tenant, at)
  }
  findTenant(id: string) {
    return tenants.findTenant(this.db, id)
  }
  listTenants() {
    return tenants.listTenants(this.db)
  }
  setTenantEnabled(id: string, enabled: boolean) {
    return tenants.setTenantEnabled(this.db, id, enabled)
  }
  updateTenant(id: string, changes: TenantChanges) {
    return tenants.updateTenant(this.db, id, changes)
  }

  // Keys
  insertPat(record: PatRecord) {
    return keys.insertPat(this.db, record)
  }
  /** Many tokens in one transaction (all or none); not part of `Store`, emits no change. */
  insertPats(records: readonly PatRecord[]) {
    return keys.insertPats(this.db, records)
  }
  getPat(id: string) {
    return keys.getPat(this.db, id)
  }
  findPatByHash(tokenHash: string) {
    return keys.findPatByHash(this.db, tokenHash)
  }
  listPats(tenantId: string, page: PageRequest, filter?: { expiringBefore?: number }) {
    return keys.listPats(this.db, tenantId, page, filter)
  }
  revokePat(id: string, at: number) {
    return keys.revokePat(this.db, id, at)
  }
  recordPatUse(uses: ReadonlyMap<string, number> | keys.EncodedPatUses) {
    return keys.recordPatUse(this.db, uses)
  }
  updatePat(id: string, changes: PatChanges) {
    return keys.updatePat(this.db, id, changes)
  }
  rotatePat(oldId: string, replacement: PatRecord, at: number, graceUntil: number) {
    return keys.rotatePat(this.db, oldId, replacement, at, graceUntil)
  }
  revokePatFamily(id: string, at: number) {
    return keys.revokePatFamily(this.db, id, at)
  }
  listPatFamily(id: string) {
    return keys.listPatFamily(this.db, id)
  }

  // Issuers and policies
  putIssuer(issuer: IssuerConfig, at: number) {
    return issuers.putIssuer(this.db, issuer, at)
  }
  listIssuers() {
    return issuers.listIssuers(this.db)
  }
  removeIssuer(issuer: string) {
    return issuers.removeIssuer(this.db, issuer)
  }
  getPolicy(name: string) {
    return issuers.getPolicy(this.db, name)
  }
  putPolicy(name: string, text: string, at: number) {
    return issuers.putPolicy(this.db, name, text, at)
  }
  removePolicy(name: string) {
    return issuers.removePolicy(this.db, name)
  }

  // JWT revocation rules
  putJwtRevocation(rule: JwtRevocationRule) {
    return jwtRevocations.putJwtRevocation(this.db, rule)
  }
  getJwtRevocation(id: string) {
    return jwtRevocations.getJwtRevocation(this.db, id)
  }
  listJwtRevocations(now: number) {
    return jwtRevocations.listJwtRevocations(this.db, now)
  }
  snapshotJwtRevocations(now: number) {
    return jwtRevocations.snapshotJwtRevocations(this.db, now)
  }
  removeJwtRevocation(id: string) {
    return jwtRevocations.removeJwtRevocation(this.db, id)
  }
  pruneJwtRevocations(before: number, limit: number) {
    return jwtRevocations.pruneJwtRevocations(this.db, before, limit)
  }

  // SETs received from CAEP/SSF transmitters
  recordSsfReceived(transmitter: string, jti: string, receivedAt: number, expiresAt: number) {
    return ssfReceived.recordSsfReceived(this.db, transmitter, jti, receivedAt, expiresAt)
  }
  async forgetSsfReceived(transmitter: string, jti: string) {
    await ssfReceived.forgetSsfReceived(this.db, transmitter, jti)
  }
  pruneSsfReceived(before: number, limit: number) {
    return ssfReceived.pruneSsfReceived(this.db, before, limit)
  }

  // Audit and outbox
  appendAudit(events: readonly StoredAuditEvent[], options?: AppendAuditOptions) {
    return audit.appendAudit(this.db, events, options)
  }
  listAudit(tenantId: string, page: PageRequest) {
    return audit.listAudit(this.db, tenantId, page)
  }
  pruneAudit(before: number, limit: number) {
    return audit.pruneAudit(this.db, before, limit)
  }
  claimOutbox(now: number, limit: number, leaseMs: number, destination = '') {
    return audit.claimOutbox(this.db, now, limit, leaseMs, destination)
  }
  completeOutbox(eventIds: readonly string[], destination = '') {
    return audit.completeOutbox(this.db, eventIds, destination)
  }
  retryOutbox(eventIds: readonly string[], nextAttemptAt: number, error: string, destination = '') {
    return audit.retryOutbox(this.db, eventIds, nextAttemptAt, error, destination)
  }
  setOutboxDestinations(list: readonly OutboxDestination[]) {
    return audit.setOutboxDestinations(this.db, list)
  }
  outboxStats() {
    return audit.outboxStats(this.db)
  }
  clearOutbox() {
    return audit.clearOutbox(this.db)
  }

  // Quotas and usage
  reserveQuota(counter: string, periodStart: number, limit: number, want: number) {
    return usage.reserveQuota(this.db, counter, periodStart, limit, want)
  }
  releaseQuota(counter: string, periodStart: number, generation: number, count: number) {
    return usage.releaseQuota(this.db, counter, periodStart, generation, count)
  }
  readQuota(counters: readonly string[]) {
    return usage.readQuota(this.db, counters)
  }
  resetQuota(counter: string) {
    return usage.resetQuota(this.db, counter)
  }
  addUsage(rows: UsageRows, options: AddUsageOptions = {}) {
    return usage.addUsage(this.db, rows, options.mark)
  }
  readUsage(query: UsageQuery) {
    return usage.readUsage(this.db, query)
  }
  topKeys(
    tenantId: string,
    resolution: UsageResolution,
    since: number,
    until: number,
    limit: number,
  ) {
    return usage.topKeys(this.db, tenantId, resolution, since, until, limit)
  }
  pruneUsage(resolution: UsageResolution, before: number, limit: number) {
    return usage.pruneUsage(this.db, resolution, before, limit)
  }
}
