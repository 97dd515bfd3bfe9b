import type { PatRecord } from '../core/ports.ts'
import type { AuditEvent, Page, PageRequest } from './store.ts'

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
 * What the admin API needs from a store beyond `Store`: admin tokens (migration 6) and
 * operator searches across tenants. Both backends implement it in a file of their own
 * (`sqlite-admin.ts`, `postgres-admin.ts`).
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
  searchAudit(search: AuditSearch, page: PageRequest): Promise<Page<AuditEvent>>
}

/** `%`, `_` and `\` taken literally in a LIKE pattern (escape character `\`). */
export function likeContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}
