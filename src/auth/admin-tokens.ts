import { hash } from 'node:crypto'
import { randomBase62 } from '../core/pat.ts'
import type { AdminRole, AdminStore, AdminTokenRecord } from '../stores/admin-store.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

/** Admin tokens start with `tga_`: never confused with a PAT (`pat_`), nor accepted as one. */
export const ADMIN_TOKEN_PREFIX = 'tga_'
const ADMIN_TOKEN_RANDOM_LENGTH = 40
const ADMIN_TOKEN = /^tga_[0-9A-Za-z]{40}$/
export const ADMIN_ROLES: readonly AdminRole[] = ['read-only', 'operator']
/** Longest admin token lifetime: operator credentials must expire. */
export const MAX_ADMIN_TOKEN_LIFETIME_DAYS = 366
export const MAX_ADMIN_TOKEN_LIFETIME_MS = MAX_ADMIN_TOKEN_LIFETIME_DAYS * 86_400_000

/** Lowercase hex SHA-256 of the whole token (lookup key; the token itself is never stored). */
export function hashAdminToken(token: string): string {
  return hash('sha256', token, 'hex')
}

/**
 * Issues an admin token. Returns the plaintext once, for the operator to hand over; only its
 * SHA-256 is stored. Audited as `admin_token.issued` (name, role, expiry; never the token).
 */
/** Admin-token operations also need the store's admin role. */
type AdminDeps = OperationDeps & { readonly store: { readonly admin: AdminStore } }

export async function issueAdminToken(
  deps: AdminDeps,
  input: { name: string; role: AdminRole; lifetimeMs: number },
): Promise<{ token: string; record: AdminTokenRecord }> {
  const now = deps.clock.now()
  if (!(input.lifetimeMs > 0 && input.lifetimeMs <= MAX_ADMIN_TOKEN_LIFETIME_MS)) {
    throw new OperationRefused(
      'invalid_input',
      'expiry',
      `an admin token expires in the future and at most ${MAX_ADMIN_TOKEN_LIFETIME_DAYS} days away`,
    )
  }
  const token = ADMIN_TOKEN_PREFIX + randomBase62(ADMIN_TOKEN_RANDOM_LENGTH)
  const record: AdminTokenRecord = {
    id: `adm_${randomBase62(16)}`,
    tokenHash: hashAdminToken(token),
    name: input.name,
    role: input.role,
    last4: token.slice(-4),
    createdAt: now,
    expiresAt: now + input.lifetimeMs,
    revokedAt: null,
  }
  await deps.store.admin.insertAdminToken(record)
  await audit(deps, {
    type: 'admin_token.issued',
    tenantId: null,
    details: {
      adminTokenId: record.id,
      name: record.name,
      role: record.role,
      expiresAt: new Date(record.expiresAt).toISOString(),
    },
  })
  return { token, record }
}

/** Revokes an admin token (idempotent: `changed` false when it already was); audited. */
export async function revokeAdminToken(
  deps: AdminDeps,
  id: string,
): Promise<{ record: AdminTokenRecord; changed: boolean }> {
  const before = (await deps.store.admin.listAdminTokens()).find((t) => t.id === id)
  if (!before) throw new OperationRefused('token_unknown', id, `no admin token ${id}`)
  if (before.revokedAt !== null) return { record: before, changed: false }
  const record = (await deps.store.admin.revokeAdminToken(id, deps.clock.now())) ?? before
  await audit(deps, {
    type: 'admin_token.revoked',
    tenantId: null,
    details: { adminTokenId: id, name: record.name },
  })
  return { record, changed: true }
}

/** Why an admin token was refused (never shown to the caller beyond `invalid_token`). */
export type AdminTokenCheck =
  | { readonly ok: true; readonly record: AdminTokenRecord }
  | { readonly ok: false; readonly reason: 'malformed' | 'unknown' | 'revoked' | 'expired' }

/**
 * Checks a presented admin token: shape first (no store access for garbage), then lookup by
 * SHA-256, so the attacker-chosen input is hashed before it meets any stored value.
 */
export async function verifyAdminToken(
  store: Pick<AdminStore, 'findAdminTokenByHash'>,
  token: string,
  now: number,
): Promise<AdminTokenCheck> {
  if (!ADMIN_TOKEN.test(token)) return { ok: false, reason: 'malformed' }
  const record = await store.findAdminTokenByHash(hashAdminToken(token))
  if (!record) return { ok: false, reason: 'unknown' }
  if (record.revokedAt !== null) return { ok: false, reason: 'revoked' }
  if (record.expiresAt <= now) return { ok: false, reason: 'expired' }
  return { ok: true, record }
}

/** Who may hold an admin token: the actor `admin:<name>` of their audit events. */
export const ADMIN_TOKEN_NAME = /^[A-Za-z0-9._@-]{1,100}$/

/** An admin token as the CLI's JSON and the admin API show it: never the token or its hash. */
export function adminTokenMetadata(record: AdminTokenRecord, now: number) {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())
  return {
    id: record.id,
    name: record.name,
    role: record.role,
    last4: record.last4,
    status: adminTokenStatus(record, now),
    createdAt: iso(record.createdAt),
    expiresAt: iso(record.expiresAt),
    revokedAt: iso(record.revokedAt),
  }
}

/** An admin token's status as listings show it. */
export function adminTokenStatus(record: AdminTokenRecord, now: number) {
  if (record.revokedAt !== null) return 'revoked'
  return record.expiresAt <= now ? 'expired' : 'active'
}
