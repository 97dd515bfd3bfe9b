/**
 * The embedded store: one SQLite file through `node:sqlite` (the only module that imports
 * it, since its API is still moving). Every method does synchronous work inside an async
 * function, so failures always arrive as rejections.
 *
 * The CLI and the server are different processes on the same file, so the database runs in
 * WAL mode (readers never block the writer) with a busy timeout (a writer waits for the
 * other process's write instead of failing at once).
 */
import { DatabaseSync, type StatementSync } from 'node:sqlite'
import type { IssuerConfig } from '../core/issuer.ts'
import { type Clock, type PatRecord, systemClock, type Tenant } from '../core/ports.ts'
import type { AdminStore } from './admin-store.ts'
import type { LogEntry } from './change-log.ts'
import { ChangeFollower } from './change-log.ts'
import { checkPageLimit, decodeCursor, toPage } from './cursor.ts'
import * as shared from './rows.ts'
import { createSqliteAdminStore } from './sqlite-admin.ts'
import { sqliteMigrations } from './sqlite-migrations.ts'
import {
  type AppendAuditOptions,
  type Changed,
  checkReplacement,
  type OutboxEntry,
  type OutboxStats,
  type Page,
  type PageRequest,
  type PatChanges,
  type QuotaCount,
  type QuotaReservation,
  type Store,
  type StoreChange,
  type StoredAuditEvent,
  type StoredIssuer,
  type StoredPolicy,
  type StoreTransaction,
  type TenantChanges,
  type UsageQuery,
  type UsageResolution,
  type UsageRow,
} from './store.ts'

/** Options of `openSqliteStore`. */
export interface SqliteStoreOptions {
  /** Stamps `schema_migrations.applied_at`. Default: the system clock. */
  readonly clock?: Clock | undefined
  /** How long a write waits for another process's write lock, in ms. Default 5000. */
  readonly busyTimeoutMs?: number | undefined
  /**
   * How often `watch` reads the change log for commits by other processes (the CLI, other
   * workers), in ms. Default 500; 0 disables it (then only this object's own changes are
   * delivered).
   */
  readonly externalChangePollMs?: number | undefined
  /**
   * Deletes change-log entries older than `before` (retention). Default: on this connection;
   * the write-behind writer thread takes it over (sqlite-writer.ts), so that a delete that
   * waits for another process's write lock never waits on the event loop.
   */
  readonly pruneChangeLog?: ((before: number) => Promise<unknown>) | undefined
}

/**
 * Opens (creating if needed) the SQLite database at `path`. It does NOT migrate: call
 * `migrate()` before anything else (idempotent, safe when two processes race), so that
 * opening a file never changes its schema behind the operator's back.
 *
 * @example
 *   const store = openSqliteStore(join(dataDir, 'tokengate.db'))
 *   await store.migrate()
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): SqliteStore {
  return new SqliteStore(path, options)
}

const LATEST_VERSION = shared.latestVersion(sqliteMigrations)

// SQLite extended result codes for the constraint violations we translate.
const SQLITE_CONSTRAINT_PRIMARYKEY = 1555
const SQLITE_CONSTRAINT_UNIQUE = 2067
const SQLITE_CONSTRAINT_FOREIGNKEY = 787

const EXPIRING = 'AND expires_at IS NOT NULL AND expires_at < $before AND revoked_at IS NULL'
const AFTER_PAT = 'AND (created_at, id) < ($at, $id)'

function prepareStatements(db: DatabaseSync) {
  const listPats = (where: string) =>
    db.prepare(`SELECT ${shared.PAT_COLUMNS} FROM pats WHERE tenant_id = $tenant ${where}
      ORDER BY created_at DESC, id DESC LIMIT $limit`)
  const listAudit = (where: string) =>
    db.prepare(`SELECT ${shared.AUDIT_COLUMNS} FROM audit_events WHERE tenant_id = $tenant ${where}
      ORDER BY time DESC, id DESC LIMIT $limit`)
  return {
    insertTenant: db.prepare(
      `INSERT INTO tenants (${shared.TENANT_COLUMNS}) VALUES (?, ?, 1, ?, NULL)`,
    ),
    updateTenant: db.prepare(`UPDATE tenants SET name = ?, rate_limit = ? WHERE id = ?`),
    findTenant: db.prepare(`SELECT ${shared.TENANT_COLUMNS} FROM tenants WHERE id = ?`),
    listTenants: db.prepare(`SELECT ${shared.TENANT_COLUMNS} FROM tenants ORDER BY id`),
    setTenantEnabled: db.prepare(
      `UPDATE tenants SET enabled = ? WHERE id = ? RETURNING ${shared.TENANT_COLUMNS}`,
    ),
    insertPat: db.prepare(`INSERT INTO pats (${shared.PAT_COLUMNS})
      VALUES (${Array(shared.PAT_COLUMN_COUNT).fill('?').join(', ')})`),
    updatePat:
      db.prepare(`UPDATE pats SET ${shared.PAT_EDIT_COLUMNS.map((c) => `${c} = ?`).join(', ')}
      WHERE id = ?`),
    findPatByHash: db.prepare(`SELECT ${shared.PAT_COLUMNS} FROM pats WHERE token_hash = ?`),
    getPat: db.prepare(`SELECT ${shared.PAT_COLUMNS} FROM pats WHERE id = ?`),
    listPats: listPats(''),
    listPatsAfter: listPats(AFTER_PAT),
    listExpiring: listPats(EXPIRING),
    listExpiringAfter: listPats(`${EXPIRING} ${AFTER_PAT}`),
    // COALESCE keeps the first revocation time: revoking twice changes nothing.
    revokePat: db.prepare(`UPDATE pats SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?
      RETURNING ${shared.PAT_COLUMNS}`),
    // Only a current token can be rotated: revoked or already replaced ones match no row.
    supersedePat: db.prepare(`UPDATE pats SET superseded_at = $at, grace_until = $graceUntil
      WHERE id = $id AND revoked_at IS NULL AND superseded_at IS NULL
      RETURNING ${shared.PAT_COLUMNS}`),
    listPatFamily: db.prepare(`WITH RECURSIVE ${shared.rotationFamily('?')}
      SELECT ${shared.PAT_COLUMNS} FROM pats WHERE id IN (SELECT id FROM down)
      ORDER BY created_at, id`),
    revokePatFamily: db.prepare(`WITH RECURSIVE ${shared.rotationFamily('$id')}
      UPDATE pats SET revoked_at = $at
      WHERE id IN (SELECT id FROM down) AND revoked_at IS NULL
      RETURNING ${shared.PAT_COLUMNS}`),
    recordPatUse: db.prepare(`UPDATE pats SET last_used_at = $at
      WHERE id = $id AND (last_used_at IS NULL OR last_used_at < $at)`),
    putIssuer: db.prepare(`INSERT INTO issuers (${shared.ISSUER_COLUMNS}) VALUES (?, ?, ?)
      ON CONFLICT (issuer) DO UPDATE SET config = excluded.config`),
    listIssuers: db.prepare(`SELECT ${shared.ISSUER_COLUMNS} FROM issuers ORDER BY issuer`),
    removeIssuer: db.prepare('DELETE FROM issuers WHERE issuer = ?'),
    // An id already stored is skipped: a retried batch that did commit is not duplicated.
    appendAudit: db.prepare(`INSERT INTO audit_events (${shared.AUDIT_COLUMNS})
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`),
    queueOutbox: db.prepare('INSERT INTO event_outbox (event_id) VALUES (?)'),
    dueOutbox: db.prepare(`SELECT o.seq AS seq, o.attempts AS attempts,
        a.id, a.time, a.type, a.tenant_id, a.actor, a.outcome, a.client_address, a.request_id,
        a.details
      FROM event_outbox o JOIN audit_events a ON a.id = o.event_id
      WHERE o.next_attempt_at <= $now AND (o.claimed_until IS NULL OR o.claimed_until <= $now)
      ORDER BY o.seq LIMIT $limit`),
    claimOutbox: db.prepare('UPDATE event_outbox SET claimed_until = ? WHERE seq = ?'),
    completeOutbox: db.prepare('DELETE FROM event_outbox WHERE event_id = ?'),
    retryOutbox: db.prepare(`UPDATE event_outbox SET attempts = attempts + 1,
      next_attempt_at = ?, claimed_until = NULL, last_error = ? WHERE event_id = ?`),
    outboxStats: db.prepare(`SELECT count(*) AS pending, min(a.time) AS oldest
      FROM event_outbox o JOIN audit_events a ON a.id = o.event_id`),
    clearOutbox: db.prepare('DELETE FROM event_outbox'),
    listAudit: listAudit(''),
    listAuditAfter: listAudit('AND (time, id) < ($at, $id)'),
    getPolicy: db.prepare('SELECT name, text, updated_at FROM policies WHERE name = ?'),
    putPolicy: db.prepare(`INSERT INTO policies (name, text, updated_at) VALUES (?, ?, ?)
      ON CONFLICT (name) DO UPDATE SET text = excluded.text, updated_at = excluded.updated_at`),
    removePolicy: db.prepare('DELETE FROM policies WHERE name = ?'),
    changesAfter: db.prepare(`SELECT seq, kind, subject, at FROM change_log WHERE seq > ?
      ORDER BY seq LIMIT ?`),
    lowestChange: db.prepare('SELECT min(seq) AS lowest FROM change_log'),
    pruneChanges: db.prepare('DELETE FROM change_log WHERE at < ?'),
    pruneAudit: db.prepare(`DELETE FROM audit_events WHERE id IN (
      SELECT id FROM audit_events a WHERE time < ? AND NOT EXISTS (
        SELECT 1 FROM event_outbox o WHERE o.event_id = a.id)
      ORDER BY time LIMIT ?)`),
    // One statement: a later period starts the count again, the grant never takes the count
    // past the limit, and last_grant says what this call got (SET reads the old row).
    reserveQuota: db.prepare(`INSERT INTO quota_usage (counter, period_start, used, last_grant)
      VALUES ($counter, $period, min($want, $limit), min($want, $limit))
      ON CONFLICT (counter) DO UPDATE SET
        last_grant = CASE WHEN quota_usage.period_start < excluded.period_start
          THEN excluded.used ELSE max(0, min($want, $limit - quota_usage.used)) END,
        used = CASE WHEN quota_usage.period_start < excluded.period_start
          THEN excluded.used ELSE quota_usage.used + max(0, min($want, $limit - quota_usage.used)) END,
        period_start = max(quota_usage.period_start, excluded.period_start)
      RETURNING last_grant, used, period_start, generation`),
    releaseQuota: db.prepare(`UPDATE quota_usage SET used = max(0, used - ?)
      WHERE counter = ? AND period_start = ? AND generation = ?`),
    readQuota: db.prepare('SELECT period_start, used FROM quota_usage WHERE counter = ?'),
    resetQuota: db.prepare(`UPDATE quota_usage SET used = 0, last_grant = 0,
      generation = generation + 1 WHERE counter = ?`),
    addUsage: db.prepare(`INSERT INTO usage_counts (${shared.USAGE_COLUMNS})
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT (scope, subject, resolution, bucket_start) DO UPDATE SET
        allowed = allowed + excluded.allowed,
        unauthorized = unauthorized + excluded.unauthorized,
        forbidden = forbidden + excluded.forbidden,
        limited = limited + excluded.limited`),
    readUsage: db.prepare(`SELECT ${shared.USAGE_COLUMNS} FROM usage_counts
      WHERE scope = ? AND subject = ? AND resolution = ? AND bucket_start >= ? AND bucket_start < ?
      ORDER BY bucket_start`),
    topKeys: db.prepare(`SELECT subject, tenant_id, sum(allowed) AS allowed,
        sum(unauthorized) AS unauthorized,
        sum(forbidden) AS forbidden, sum(limited) AS limited
      FROM usage_counts
      WHERE scope = 'key' AND tenant_id = ? AND resolution = ? AND bucket_start >= ? AND bucket_start < ?
      GROUP BY subject, tenant_id
      ORDER BY sum(allowed) + sum(unauthorized) + sum(forbidden) + sum(limited) DESC, subject
      LIMIT ?`),
    pruneUsage: db.prepare(`DELETE FROM usage_counts
      WHERE (scope, subject, resolution, bucket_start) IN (
        SELECT scope, subject, resolution, bucket_start FROM usage_counts
        WHERE resolution = ? AND bucket_start < ? LIMIT ?)`),
  }
}

type Statements = ReturnType<typeof prepareStatements>

/** The SQLite `Store`. Create it with `openSqliteStore`. */
export class SqliteStore implements Store {
  readonly kind = 'sqlite'
  readonly #db: DatabaseSync
  readonly #path: string
  readonly #options: SqliteStoreOptions
  readonly #clock: Clock
  readonly #ping: StatementSync
  readonly #listeners = new Set<(change: StoreChange) => void>()
  readonly #follower: ChangeFollower
  #statements: Statements | undefined
  #closed = false
  /** Admin tokens and operator searches (sqlite-admin.ts). */
  readonly admin: AdminStore = createSqliteAdminStore(() => this.#open())

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.#path = path
    this.#options = options
    this.#clock = options.clock ?? systemClock
    this.#follower = new ChangeFollower({
      reader: {
        head: async () => {
          const db = this.#open()
          const exists = db
            .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'change_log'")
            .get()
          // Not migrated yet: nothing was ever logged, so everything logged later follows 0.
          if (!exists) return 0
          return (db.prepare('SELECT max(seq) AS head FROM change_log').get()?.head as number) ?? 0
        },
        readAfter: async (seq, limit) => {
          const s = this.#s()
          const entries = s.changesAfter.all(seq, limit) as unknown as LogEntry[]
          return { entries, lowest: (s.lowestChange.get()?.lowest as number | null) ?? null }
        },
        prune: async (before) => {
          await (options.pruneChangeLog ?? ((at: number) => this.pruneChangeLog(at)))(before)
        },
      },
      emit: (change) => this.#emit(change),
      pollMs: options.externalChangePollMs ?? 500,
      warn: (_obj, msg) => process.emitWarning(msg),
    })
    this.#db = new DatabaseSync(path, { enableForeignKeyConstraints: true })
    try {
      // busy_timeout first: switching to WAL itself needs a lock another process may hold.
      this.#db.exec(`PRAGMA busy_timeout = ${Math.trunc(options.busyTimeoutMs ?? 5000)}`)
      this.#db.exec('PRAGMA journal_mode = WAL')
      this.#db.exec('PRAGMA foreign_keys = ON')
      // FULL, not WAL's usual NORMAL: a revocation the CLI reported as done must survive a
      // power loss. Hot-path writes (last use, audit) are batched, so the fsync is rare.
      this.#db.exec('PRAGMA synchronous = FULL')
      this.#ping = this.#db.prepare('SELECT 1')
    } catch (error) {
      this.#db.close()
      throw error
    }
  }

  async migrate(): Promise<number[]> {
    const db = this.#open()
    const applied = this.#transaction(() => {
      db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL) STRICT`)
      const done = db
        .prepare('SELECT version FROM schema_migrations')
        .all()
        .map((row) => row.version as number)
      const record = db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)')
      const now: number[] = []
      for (const migration of shared.pendingMigrations(sqliteMigrations, done)) {
        db.exec(migration.sql)
        record.run(migration.version, this.#clock.now())
        now.push(migration.version)
      }
      return now
    })
    this.#statements = undefined
    return applied
  }

  async ping(): Promise<void> {
    this.#open()
    this.#ping.get()
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.#listeners.clear()
    this.#follower.close()
    this.#statements = undefined
    this.#db.close()
  }

  /**
   * The work runs on a connection of its own to the same file, in one `BEGIN IMMEDIATE`
   * transaction: calls on this object meanwhile (the server's write-behind) are not part of
   * it, and other writers wait for it (busy timeout), as for any write.
   */
  async transaction<T>(work: (tx: StoreTransaction) => Promise<T>): Promise<T> {
    this.#open()
    const tx = new SqliteStore(this.#path, { ...this.#options, externalChangePollMs: 0 })
    let result: T
    try {
      const db = tx.#open()
      db.exec('BEGIN IMMEDIATE')
      try {
        result = await work(tx)
        db.exec('COMMIT')
      } catch (error) {
        if (db.isTransaction) db.exec('ROLLBACK')
        throw error
      }
    } finally {
      await tx.close()
    }
    await this.#delivered()
    return result
  }

  async findPatByHash(tokenHash: string): Promise<PatRecord | undefined> {
    const row = this.#s().findPatByHash.get(tokenHash) as shared.PatRow | undefined
    return row && shared.toPat(row)
  }

  async findTenant(id: string): Promise<Tenant | undefined> {
    const row = this.#s().findTenant.get(id) as shared.TenantRow | undefined
    return row && shared.toTenant(row)
  }

  async createTenant(tenant: { id: string; name: string }, at: number): Promise<Tenant> {
    const s = this.#s()
    checked(() => s.insertTenant.run(tenant.id, tenant.name, at), `tenant ${tenant.id}`)
    await this.#delivered()
    return { id: tenant.id, name: tenant.name, enabled: true, createdAt: at, rateLimit: null }
  }

  async updateTenant(id: string, changes: TenantChanges): Promise<Changed<Tenant> | undefined> {
    const s = this.#s()
    const changed = this.#transaction(() => {
      const row = s.findTenant.get(id) as shared.TenantRow | undefined
      if (!row) return undefined
      const before = shared.toTenant(row)
      const after = shared.changedTenant(before, changes)
      s.updateTenant.run(after.name, shared.jsonText(after.rateLimit), id)
      return { before, after }
    })
    if (changed) await this.#delivered()
    return changed
  }

  async listTenants(): Promise<readonly Tenant[]> {
    return (this.#s().listTenants.all() as unknown as shared.TenantRow[]).map(shared.toTenant)
  }

  async setTenantEnabled(id: string, enabled: boolean): Promise<Tenant | undefined> {
    const row = this.#s().setTenantEnabled.get(enabled ? 1 : 0, id) as shared.TenantRow | undefined
    await this.#delivered()
    return row && shared.toTenant(row)
  }

  async insertPat(record: PatRecord): Promise<void> {
    const s = this.#s()
    checked(() => s.insertPat.run(...patRowValues(record)), `token ${record.id}`)
  }

  /**
   * Inserts many tokens in one transaction (all or none): for imports, seeding and
   * benchmarks. Not part of `Store`; emits no change (new tokens invalidate no cache).
   */
  async insertPats(records: readonly PatRecord[]): Promise<void> {
    const s = this.#s()
    this.#transaction(() => {
      for (const record of records) {
        checked(() => s.insertPat.run(...patRowValues(record)), `token ${record.id}`)
      }
    })
  }

  async getPat(id: string): Promise<PatRecord | undefined> {
    const row = this.#s().getPat.get(id) as shared.PatRow | undefined
    return row && shared.toPat(row)
  }

  async listPatFamily(id: string): Promise<readonly PatRecord[]> {
    const rows = this.#s().listPatFamily.all(id) as unknown as shared.PatRow[]
    return rows.map(shared.toPat)
  }

  async listPats(
    tenantId: string,
    page: PageRequest,
    filter: { expiringBefore?: number } = {},
  ): Promise<Page<PatRecord>> {
    const s = this.#s()
    const limit = checkPageLimit(page.limit)
    const after = page.cursor === undefined ? undefined : decodeCursor(page.cursor)
    const expiring = filter.expiringBefore !== undefined
    const statement = expiring
      ? after
        ? s.listExpiringAfter
        : s.listExpiring
      : after
        ? s.listPatsAfter
        : s.listPats
    const params: Record<string, number | string> = { tenant: tenantId, limit: limit + 1 }
    if (after) Object.assign(params, { at: after.at, id: after.id })
    if (expiring) params.before = filter.expiringBefore as number
    const rows = statement.all(params) as unknown as shared.PatRow[]
    return toPage(rows.map(shared.toPat), limit, (r) => ({ at: r.createdAt, id: r.id }))
  }

  async revokePat(id: string, at: number): Promise<PatRecord | undefined> {
    const row = this.#s().revokePat.get(at, id) as shared.PatRow | undefined
    await this.#delivered()
    return row && shared.toPat(row)
  }

  async rotatePat(
    oldId: string,
    replacement: PatRecord,
    at: number,
    graceUntil: number,
  ): Promise<PatRecord | undefined> {
    checkReplacement(oldId, replacement, at, graceUntil)
    const s = this.#s()
    const row = this.#transaction(() => {
      const old = s.supersedePat.get({ id: oldId, at, graceUntil }) as shared.PatRow | undefined
      if (!old) return undefined
      checked(() => s.insertPat.run(...patRowValues(replacement)), `token ${replacement.id}`)
      return old
    })
    await this.#delivered()
    return row && shared.toPat(row)
  }

  async revokePatFamily(id: string, at: number): Promise<readonly PatRecord[]> {
    const s = this.#s()
    const rows = this.#transaction(
      () => s.revokePatFamily.all({ id, at }) as unknown as shared.PatRow[],
    )
    await this.#delivered()
    return rows.map(shared.toPat)
  }

  async updatePat(id: string, changes: PatChanges): Promise<Changed<PatRecord> | undefined> {
    const s = this.#s()
    const changed = this.#transaction(() => {
      const row = s.getPat.get(id) as shared.PatRow | undefined
      if (!row || row.revoked_at !== null) return undefined
      const before = shared.toPat(row)
      const after = shared.changedPat(before, changes)
      s.updatePat.run(...shared.patEditValues(after, (list) => JSON.stringify(list)), id)
      return { before, after }
    })
    if (changed) await this.#delivered()
    return changed
  }

  /** Deletes change-log entries older than `before`; how many. */
  async pruneChangeLog(before: number): Promise<number> {
    return Number(this.#s().pruneChanges.run(before).changes)
  }

  async recordPatUse(uses: ReadonlyMap<string, number>): Promise<void> {
    const s = this.#s()
    if (uses.size === 0) return
    this.#transaction(() => {
      for (const [id, at] of uses) s.recordPatUse.run({ id, at })
    })
  }

  async putIssuer(issuer: IssuerConfig, at: number): Promise<void> {
    const { name, config } = shared.issuerValues(issuer)
    this.#s().putIssuer.run(name, config, at)
    await this.#delivered()
  }

  async getPolicy(name: string): Promise<StoredPolicy | undefined> {
    const row = this.#s().getPolicy.get(name) as
      | { name: string; text: string; updated_at: number }
      | undefined
    return row && { name: row.name, text: row.text, updatedAt: row.updated_at }
  }

  async putPolicy(name: string, text: string, at: number): Promise<void> {
    this.#s().putPolicy.run(name, text, at)
    await this.#delivered()
  }

  async removePolicy(name: string): Promise<boolean> {
    const removed = this.#s().removePolicy.run(name).changes > 0
    await this.#delivered()
    return removed
  }

  async listIssuers(): Promise<readonly StoredIssuer[]> {
    const rows = this.#s().listIssuers.all() as unknown as shared.IssuerRow[]
    return rows.map(shared.toIssuer)
  }

  async removeIssuer(issuer: string): Promise<boolean> {
    const removed = this.#s().removeIssuer.run(issuer).changes > 0
    await this.#delivered()
    return removed
  }

  async appendAudit(
    events: readonly StoredAuditEvent[],
    options?: AppendAuditOptions,
  ): Promise<void> {
    const s = this.#s()
    if (events.length === 0) return
    const queue = options?.queue ?? true
    this.#transaction(() => {
      for (const e of events) {
        const stored = s.appendAudit.run(...shared.auditValues(e))
        // Queued only when stored now: a retried batch does not re-queue delivered events.
        if (queue && stored.changes > 0) s.queueOutbox.run(e.id)
      }
    })
  }

  async claimOutbox(now: number, limit: number, leaseMs: number): Promise<readonly OutboxEntry[]> {
    const s = this.#s()
    const rows = this.#transaction(() => {
      const due = s.dueOutbox.all({ now, limit }) as unknown as (shared.AuditRow & {
        seq: number
        attempts: number
      })[]
      for (const row of due) s.claimOutbox.run(now + leaseMs, row.seq)
      return due
    })
    return rows.map((row) => ({ event: shared.toAudit(row), attempts: row.attempts }))
  }

  async completeOutbox(eventIds: readonly string[]): Promise<void> {
    const s = this.#s()
    if (eventIds.length === 0) return
    this.#transaction(() => {
      for (const id of eventIds) s.completeOutbox.run(id)
    })
  }

  async retryOutbox(
    eventIds: readonly string[],
    nextAttemptAt: number,
    error: string,
  ): Promise<void> {
    const s = this.#s()
    if (eventIds.length === 0) return
    this.#transaction(() => {
      for (const id of eventIds) s.retryOutbox.run(nextAttemptAt, error.slice(0, 500), id)
    })
  }

  async outboxStats(): Promise<OutboxStats> {
    const row = this.#s().outboxStats.get() as { pending: number; oldest: number | null }
    return { pending: row.pending, oldestTime: row.oldest }
  }

  async clearOutbox(): Promise<number> {
    return Number(this.#s().clearOutbox.run().changes)
  }

  async listAudit(tenantId: string, page: PageRequest): Promise<Page<StoredAuditEvent>> {
    const s = this.#s()
    const limit = checkPageLimit(page.limit)
    const after = page.cursor === undefined ? undefined : decodeCursor(page.cursor)
    const rows = (after
      ? s.listAuditAfter.all({ tenant: tenantId, limit: limit + 1, at: after.at, id: after.id })
      : s.listAudit.all({ tenant: tenantId, limit: limit + 1 })) as unknown as shared.AuditRow[]
    return toPage(rows.map(shared.toAudit), limit, (e) => ({ at: e.time, id: e.id }))
  }

  async pruneAudit(before: number, limit: number): Promise<number> {
    return Number(this.#s().pruneAudit.run(before, limit).changes)
  }

  async reserveQuota(
    counter: string,
    periodStart: number,
    limit: number,
    want: number,
  ): Promise<QuotaReservation> {
    const row = this.#s().reserveQuota.get({ counter, period: periodStart, limit, want }) as {
      last_grant: number
      used: number
      period_start: number
      generation: number
    }
    return {
      granted: row.last_grant,
      used: row.used,
      periodStart: row.period_start,
      generation: row.generation,
    }
  }

  async releaseQuota(
    counter: string,
    periodStart: number,
    generation: number,
    count: number,
  ): Promise<void> {
    this.#s().releaseQuota.run(count, counter, periodStart, generation)
  }

  async readQuota(counters: readonly string[]): Promise<ReadonlyMap<string, QuotaCount>> {
    const s = this.#s()
    const found = new Map<string, QuotaCount>()
    for (const counter of counters) {
      const row = s.readQuota.get(counter) as { period_start: number; used: number } | undefined
      if (row) found.set(counter, { periodStart: row.period_start, used: row.used })
    }
    return found
  }

  async resetQuota(counter: string): Promise<void> {
    this.#s().resetQuota.run(counter)
  }

  async addUsage(rows: readonly UsageRow[]): Promise<void> {
    const s = this.#s()
    if (rows.length === 0) return
    this.#transaction(() => {
      for (const row of rows) s.addUsage.run(...shared.usageValues(row))
    })
  }

  async readUsage(query: UsageQuery): Promise<readonly UsageRow[]> {
    const rows = this.#s().readUsage.all(
      query.scope,
      query.subject,
      query.resolution,
      query.since,
      query.until,
    ) as unknown as shared.UsageCountRow[]
    return rows.map(shared.toUsage)
  }

  async topKeys(
    tenantId: string,
    resolution: UsageResolution,
    since: number,
    until: number,
    limit: number,
  ) {
    const rows = this.#s().topKeys.all(
      tenantId,
      resolution,
      since,
      until,
      limit,
    ) as unknown as shared.UsageCountRow[]
    return rows.map(shared.toKeyUsage)
  }

  async pruneUsage(resolution: UsageResolution, before: number, limit: number): Promise<number> {
    return Number(this.#s().pruneUsage.run(resolution, before, limit).changes)
  }

  /**
   * Changes are delivered in change-log order (change-log.ts): those made through THIS
   * object before the method that made them resolves; those another process makes to the
   * same file (the CLI revoking a token, another worker) within `externalChangePollMs`.
   */
  watch(listener: (change: StoreChange) => void): () => void {
    const wrapped = (change: StoreChange) => listener(change)
    this.#listeners.add(wrapped)
    if (!this.#closed) {
      void this.#follower.start().catch(() => {})
      this.#follower.poll(true)
    }
    return () => {
      this.#listeners.delete(wrapped)
      if (this.#listeners.size === 0) this.#follower.poll(false)
    }
  }

  /** Delivers what this object just wrote (and anything before it) to its watchers. */
  async #delivered(): Promise<void> {
    if (this.#listeners.size > 0) await this.#follower.catchUp()
  }

  #open(): DatabaseSync {
    if (this.#closed) throw new Error('sqlite store is closed')
    return this.#db
  }

  /** Statements, prepared once on first use after migration. */
  #s(): Statements {
    const db = this.#open()
    if (this.#statements) return this.#statements
    const hasTable = db
      .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
      .get()
    const version = hasTable
      ? ((db.prepare('SELECT max(version) AS v FROM schema_migrations').get()?.v as
          | number
          | null) ?? 0)
      : 0
    if (version !== LATEST_VERSION) {
      throw new Error(
        `sqlite schema is at version ${version}, this tokengate needs ${LATEST_VERSION}: run migrate()`,
      )
    }
    this.#statements = prepareStatements(db)
    return this.#statements
  }

  #transaction<T>(work: () => T): T {
    const db = this.#open()
    // Inside `transaction()`: a savepoint keeps this method's statements together in it.
    if (db.isTransaction) return savepoint(db, work)
    // IMMEDIATE takes the write lock up front, so two processes migrating or writing at once
    // queue on busy_timeout instead of failing halfway with SQLITE_BUSY on lock upgrade.
    db.exec('BEGIN IMMEDIATE')
    try {
      const result = work()
      db.exec('COMMIT')
      return result
    } catch (error) {
      if (db.isTransaction) db.exec('ROLLBACK')
      throw error
    }
  }

  #emit(change: StoreChange): void {
    for (const listener of [...this.#listeners]) {
      try {
        listener(change)
      } catch (error) {
        // A listener's bug must not fail the write that already committed.
        process.emitWarning(`store watch listener threw: ${String(error)}`)
      }
    }
  }
}

function savepoint<T>(db: DatabaseSync, work: () => T): T {
  db.exec('SAVEPOINT step')
  try {
    const result = work()
    db.exec('RELEASE step')
    return result
  } catch (error) {
    db.exec('ROLLBACK TO step')
    db.exec('RELEASE step')
    throw error
  }
}

/** PAT column values; SQLite keeps the permission list as JSON text. */
const patRowValues = (record: PatRecord) => shared.patValues(record, (list) => JSON.stringify(list))

/** Runs a write, translating SQLite's constraint errors (extended result codes). */
function checked(run: () => unknown, what: string): void {
  try {
    run()
  } catch (error) {
    throw shared.translateConstraint(error, constraintOf(error), what)
  }
}

function constraintOf(error: unknown): shared.ConstraintKind {
  const code = (error as { errcode?: unknown }).errcode
  if (code === SQLITE_CONSTRAINT_PRIMARYKEY || code === SQLITE_CONSTRAINT_UNIQUE) return 'unique'
  if (code === SQLITE_CONSTRAINT_FOREIGNKEY) return 'foreign_key'
  return undefined
}
