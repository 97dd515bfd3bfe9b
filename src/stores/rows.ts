/**
 * The row layer both stores share: column lists, row shapes, row <-> record mappers, the
 * migration plan, the rotation-family walk and constraint-error translation. What differs
 * per dialect is only how values arrive (SQLite: INTEGER numbers and JSON text; Postgres:
 * bigint strings, booleans, arrays and jsonb objects), which the mappers normalise. SQL
 * statements stay in sqlite.ts and postgres.ts.
 */
import type { IssuerConfig } from '../core/issuer.ts'
import type { PatRecord, Quota, RateLimitOverride, Tenant } from '../core/ports.ts'
import {
  type AdminRole,
  type AdminTokenRecord,
  ConflictError,
  type ConsoleSessionRecord,
  type PatChanges,
  type StoredAuditEvent,
  type StoredIssuer,
  type TenantChanges,
  type UsageResolution,
  type UsageRow,
  type UsageScope,
} from './store.ts'

/** A time column: INTEGER in SQLite, bigint (read as a string by pg) in Postgres. */
type Time = number | string
/** A JSON column: TEXT in SQLite, jsonb/array (already parsed) in Postgres. */
type Json<T> = string | T

export interface TenantRow {
  id: string
  name: string
  enabled: number | boolean
  created_at: Time
  rate_limit: Json<RateLimitOverride> | null
}

export interface PatRow {
  id: string
  token_hash: string
  tenant_id: string
  subject: string
  name: string
  permissions: Json<string[]>
  last4: string
  created_at: Time
  expires_at: Time | null
  revoked_at: Time | null
  last_used_at: Time | null
  rotated_from: string | null
  superseded_at: Time | null
  grace_until: Time | null
  disabled_at: Time | null
  rate_limit: Json<RateLimitOverride> | null
  quota: Json<Quota> | null
  metadata: Json<Record<string, unknown>> | null
  external_id: string | null
  certificate_thumbprint: string | null
}

export interface IssuerRow {
  issuer: string
  config: Json<Omit<IssuerConfig, 'issuer'>>
  created_at: Time
}

export interface AuditRow {
  id: string
  time: Time
  type: string
  tenant_id: string | null
  actor: string | null
  outcome: string
  client_address: string | null
  request_id: string | null
  details: Json<Record<string, unknown>>
}

export interface AdminTokenRow {
  id: string
  token_hash: string
  name: string
  role: string
  last4: string
  created_at: Time
  expires_at: Time
  revoked_at: Time | null
}

export interface SessionRow {
  id_hash: string
  credential: string
  operator: Json<
    Omit<ConsoleSessionRecord['operator'], 'adminTokenHash'> & { adminTokenHash?: string }
  >
  csrf: string
  created_at: Time
  expires_at: Time
  last_seen: Time
  flash: string | null
  notice: Json<unknown> | null
}

export const SESSION_COLUMNS =
  'id_hash, credential, operator, csrf, created_at, expires_at, last_seen, flash, notice'

export function toSession(row: SessionRow): ConsoleSessionRecord {
  const operator = json(row.operator)
  return {
    idHash: row.id_hash,
    credential: row.credential,
    operator: {
      actor: operator.actor,
      role: operator.role,
      expiresAt: operator.expiresAt,
      adminTokenHash: operator.adminTokenHash,
      jwt: operator.jwt,
    },
    csrf: row.csrf,
    createdAt: ms(row.created_at),
    expiresAt: ms(row.expires_at),
    lastSeen: ms(row.last_seen),
    flash: row.flash,
    notice:
      row.notice === null
        ? null
        : typeof row.notice === 'string'
          ? row.notice
          : JSON.stringify(row.notice),
  }
}

/** A session's column values in SESSION_COLUMNS order (operator and notice as JSON text). */
export function sessionValues(record: ConsoleSessionRecord) {
  return [
    record.idHash,
    record.credential,
    JSON.stringify(record.operator),
    record.csrf,
    record.createdAt,
    record.expiresAt,
    record.lastSeen,
    record.flash,
    record.notice,
  ] as const
}

export const TENANT_COLUMNS = 'id, name, enabled, created_at, rate_limit'
export const PAT_COLUMNS = `id, token_hash, tenant_id, subject, name, permissions, last4,
  created_at, expires_at, revoked_at, last_used_at, rotated_from, superseded_at, grace_until,
  disabled_at, rate_limit, quota, metadata, external_id, certificate_thumbprint`
/** How many columns PAT_COLUMNS lists (the placeholders of an INSERT). */
export const PAT_COLUMN_COUNT = 20
export const AUDIT_COLUMNS =
  'id, time, type, tenant_id, actor, outcome, client_address, request_id, details'
export const ISSUER_COLUMNS = 'issuer, config, created_at'
export const ADMIN_TOKEN_COLUMNS =
  'id, token_hash, name, role, last4, created_at, expires_at, revoked_at'

const ms = (value: Time): number => Number(value)
const msOrNull = (value: Time | null): number | null => (value === null ? null : Number(value))
const json = <T>(value: Json<T>): T =>
  typeof value === 'string' ? (JSON.parse(value) as T) : value
const jsonOrNull = <T>(value: Json<T> | null | undefined): T | null =>
  value == null ? null : json(value)
/** A JSON column's value as both dialects take it: JSON text, or NULL. */
export const jsonText = (value: unknown): string | null =>
  value == null ? null : JSON.stringify(value)

export function toTenant(row: TenantRow): Tenant {
  return {
    id: row.id,
    name: row.name,
    enabled: row.enabled === true || row.enabled === 1,
    createdAt: ms(row.created_at),
    rateLimit: jsonOrNull(row.rate_limit),
  }
}

export function toPat(row: PatRow): PatRecord {
  return {
    id: row.id,
    tokenHash: row.token_hash,
    tenantId: row.tenant_id,
    subject: row.subject,
    name: row.name,
    permissions: json(row.permissions),
    last4: row.last4,
    createdAt: ms(row.created_at),
    expiresAt: msOrNull(row.expires_at),
    revokedAt: msOrNull(row.revoked_at),
    lastUsedAt: msOrNull(row.last_used_at),
    rotatedFrom: row.rotated_from,
    supersededAt: msOrNull(row.superseded_at),
    graceUntil: msOrNull(row.grace_until),
    disabledAt: msOrNull(row.disabled_at),
    rateLimit: jsonOrNull(row.rate_limit),
    quota: jsonOrNull(row.quota),
    metadata: jsonOrNull(row.metadata),
    externalId: row.external_id,
    certificateThumbprint: row.certificate_thumbprint,
  }
}

export function toAudit(row: AuditRow): StoredAuditEvent {
  return {
    id: row.id,
    time: ms(row.time),
    type: row.type,
    tenantId: row.tenant_id,
    actor: row.actor,
    outcome: row.outcome,
    clientAddress: row.client_address,
    requestId: row.request_id,
    details: json(row.details),
  }
}

export function toIssuer(row: IssuerRow): StoredIssuer {
  return { ...json(row.config), issuer: row.issuer, createdAt: ms(row.created_at) }
}

export function toAdminToken(row: AdminTokenRow): AdminTokenRecord {
  return {
    id: row.id,
    tokenHash: row.token_hash,
    name: row.name,
    role: row.role as AdminRole,
    last4: row.last4,
    createdAt: ms(row.created_at),
    expiresAt: ms(row.expires_at),
    revokedAt: msOrNull(row.revoked_at),
  }
}

/**
 * A PAT's column values in PAT_COLUMNS order; `permissions` encoded for the dialect
 * (JSON text for SQLite, a text[] for Postgres).
 */
export function patValues<P>(record: PatRecord, permissions: (list: readonly string[]) => P) {
  return [
    record.id,
    record.tokenHash,
    record.tenantId,
    record.subject,
    record.name,
    permissions(record.permissions),
    record.last4,
    record.createdAt,
    record.expiresAt,
    record.revokedAt,
    record.lastUsedAt,
    record.rotatedFrom,
    record.supersededAt ?? null,
    record.graceUntil ?? null,
    record.disabledAt ?? null,
    jsonText(record.rateLimit),
    jsonText(record.quota),
    jsonText(record.metadata),
    record.externalId ?? null,
    record.certificateThumbprint ?? null,
  ] as const
}

/** The PAT columns an edit writes, in `patEditValues` order. */
export const PAT_EDIT_COLUMNS = [
  'name',
  'permissions',
  'expires_at',
  'disabled_at',
  'rate_limit',
  'quota',
  'metadata',
  'external_id',
  'certificate_thumbprint',
] as const

const PAT_COLUMN_NAMES = PAT_COLUMNS.split(',').map((column) => column.trim())

/** A changed PAT's editable column values in PAT_EDIT_COLUMNS order (picked from patValues). */
export function patEditValues<P>(record: PatRecord, permissions: (list: readonly string[]) => P) {
  const values = patValues(record, permissions)
  return PAT_EDIT_COLUMNS.map(
    (column) => values[PAT_COLUMN_NAMES.indexOf(column)] as (typeof values)[number],
  )
}

/** `record` with `changes` applied: an undefined field keeps its value, null clears it. */
export function changedPat(record: PatRecord, changes: PatChanges): PatRecord {
  const pick = <K extends keyof PatChanges & keyof PatRecord>(key: K) =>
    changes[key] === undefined ? record[key] : changes[key]
  return {
    ...record,
    name: pick('name') as string,
    permissions: pick('permissions') as readonly string[],
    expiresAt: pick('expiresAt') as number | null,
    disabledAt: pick('disabledAt') as number | null,
    rateLimit: pick('rateLimit') as PatRecord['rateLimit'],
    quota: pick('quota') as PatRecord['quota'],
    metadata: pick('metadata') as PatRecord['metadata'],
    externalId: pick('externalId') as string | null,
    certificateThumbprint: pick('certificateThumbprint') as string | null,
  }
}

/** `tenant` with `changes` applied. */
export function changedTenant(tenant: Tenant, changes: TenantChanges): Tenant {
  return {
    ...tenant,
    name: changes.name ?? tenant.name,
    rateLimit: changes.rateLimit === undefined ? (tenant.rateLimit ?? null) : changes.rateLimit,
  }
}

export interface UsageCountRow {
  scope: string
  subject: string
  resolution: string
  bucket_start: Time
  tenant_id: string | null
  allowed: Time
  unauthorized: Time
  forbidden: Time
  limited: Time
}

export const USAGE_COLUMNS =
  'scope, subject, resolution, bucket_start, tenant_id, allowed, unauthorized, forbidden, limited'

export function toUsage(row: UsageCountRow): UsageRow {
  return {
    scope: row.scope as UsageScope,
    subject: row.subject,
    resolution: row.resolution as UsageResolution,
    bucketStart: ms(row.bucket_start),
    tenantId: row.tenant_id,
    allowed: Number(row.allowed),
    unauthorized: Number(row.unauthorized),
    forbidden: Number(row.forbidden),
    limited: Number(row.limited),
  }
}

/** A key's summed counts, as `topKeys` returns them. */
export function toKeyUsage(row: Pick<UsageCountRow, 'subject' | 'tenant_id'> & UsageCountRow) {
  return {
    tokenId: row.subject,
    tenantId: row.tenant_id as string,
    allowed: Number(row.allowed),
    unauthorized: Number(row.unauthorized),
    forbidden: Number(row.forbidden),
    limited: Number(row.limited),
  }
}

/** An audit event's column values in AUDIT_COLUMNS order (details as JSON text). */
export function auditValues(event: StoredAuditEvent) {
  return [
    event.id,
    event.time,
    event.type,
    event.tenantId,
    event.actor,
    event.outcome,
    event.clientAddress,
    event.requestId,
    JSON.stringify(event.details),
  ] as const
}

/**
 * An issuer's columns: its name, and the rest of its configuration as JSON. A StoredIssuer
 * passed back in keeps its creation time in the column (a replace changes the config only).
 */
export function issuerValues(issuer: IssuerConfig): { name: string; config: string } {
  const { issuer: name, ...config } = issuer
  delete (config as { createdAt?: unknown }).createdAt
  return { name, config: JSON.stringify(config) }
}

/** An admin token's column values in ADMIN_TOKEN_COLUMNS order. */
export function adminTokenValues(record: AdminTokenRecord) {
  return [
    record.id,
    record.tokenHash,
    record.name,
    record.role,
    record.last4,
    record.createdAt,
    record.expiresAt,
    record.revokedAt,
  ] as const
}

export interface Migration {
  readonly version: number
  readonly sql: string
}

/**
 * The migrations still to apply, in version order, given the versions already applied.
 * Throws when the database is newer than this code (a rolling upgrade gone backwards):
 * running against a schema we do not know is refused.
 */
export function pendingMigrations(
  migrations: readonly Migration[],
  applied: Iterable<number>,
): Migration[] {
  const done = new Set(applied)
  const latest = latestVersion(migrations)
  const newest = Math.max(0, ...done)
  if (newest > latest) {
    throw new Error(
      `database schema version ${newest} is newer than this tokengate supports (${latest})`,
    )
  }
  return [...migrations].sort((a, b) => a.version - b.version).filter((m) => !done.has(m.version))
}

/** How a store runs its migrations: inside one transaction that it holds. */
export interface MigrationRunner {
  /** Runs a script (several statements, no parameters). */
  exec(script: string): Promise<unknown>
  all(sql: string, params?: readonly unknown[]): Promise<readonly Record<string, unknown>[]>
}

/**
 * Applies the pending `migrations` in order, recording each version with `now`; returns the
 * versions applied. `table` creates `schema_migrations` (DDL differs per dialect).
 */
export async function applyMigrations(
  run: MigrationRunner,
  migrations: readonly Migration[],
  table: string,
  now: number,
): Promise<number[]> {
  await run.exec(table)
  const done = await run.all('SELECT version FROM schema_migrations')
  const applied: number[] = []
  for (const migration of pendingMigrations(
    migrations,
    done.map((row) => Number(row.version)),
  )) {
    await run.exec(migration.sql)
    await run.all('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [
      migration.version,
      now,
    ])
    applied.push(migration.version)
  }
  return applied
}

export function latestVersion(migrations: readonly Migration[]): number {
  return Math.max(...migrations.map((m) => m.version))
}

/**
 * The rotation family of the token `idParam` names, as the CTEs `up` (itself and every
 * ancestor) and `down` (everything descending from any of them): the family is a tree (one
 * parent each). UNION (not UNION ALL) ends the walk even on a corrupt cycle. Same SQL in
 * both dialects; each store appends the UPDATE of `down`.
 */
export function rotationFamily(idParam: string): string {
  return `up (id, parent) AS (
      SELECT id, rotated_from FROM pats WHERE id = ${idParam}
      UNION SELECT p.id, p.rotated_from FROM pats p JOIN up ON p.id = up.parent),
    down (id) AS (
      SELECT id FROM up
      UNION SELECT p.id FROM pats p JOIN down ON p.rotated_from = down.id)`
}

/** Which constraint a driver error broke, as each dialect reads its own error codes. */
export type ConstraintKind = 'unique' | 'foreign_key' | undefined

/**
 * Constraint violations as the Store contract states them: a duplicate is a
 * ConflictError, a missing tenant a plain error; anything else (outages included) as is.
 */
export function translateConstraint(error: unknown, kind: ConstraintKind, what: string): unknown {
  if (kind === 'unique') {
    return new ConflictError(`${what} conflicts with an existing row`, { cause: error })
  }
  if (kind === 'foreign_key')
    return new Error(`${what} refers to an unknown tenant`, { cause: error })
  return error
}
