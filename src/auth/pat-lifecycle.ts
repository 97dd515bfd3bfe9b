import { fingerprintToken } from '../core/fingerprint.ts'
import { checkPatFormat, hashPat, isPatToken, issuePat, patStatus } from '../core/pat.ts'
import type { PatRecord } from '../core/ports.ts'
import type { PatStore } from '../stores/store.ts'
import { audit, type OperationDeps, OperationRefused, requireEnabledTenant } from './operations.ts'

export { type PatStatus, patStatus } from '../core/pat.ts'

const iso = (ms: number | null | undefined) => (ms == null ? null : new Date(ms).toISOString())

/** A token reference as it may be shown: a plaintext token given as an id is fingerprinted. */
const shown = (ref: string) => (isPatToken(ref) ? fingerprintToken(ref) : ref)

const DAY_MS = 86_400_000

/** The operator's PAT lifetime policy (config `pat`). */
export interface PatPolicy {
  /** Lifetime of a token issued without one. */
  readonly defaultExpiresInDays: number
  /** Longest lifetime allowed; 0: no maximum (and `never` allowed). */
  readonly maxExpiresInDays: number
}

/** A new token's lifetime: milliseconds, `never`, or the policy's default. */
export type PatLifetime = number | 'never' | 'default'

/** Operations that issue tokens run under the operator's lifetime policy. */
export interface PatOperationDeps extends OperationDeps {
  readonly patPolicy: PatPolicy
}

/**
 * The expiry of a token issued at `now` with `lifetime`, under the policy: with a maximum,
 * `never` and anything longer are refused (`lifetime_exceeded`). The one home of the rule:
 * the CLI, the admin API, the console and library callers all issue through here.
 */
export function expiryUnderPolicy(
  policy: PatPolicy,
  now: number,
  lifetime: PatLifetime,
): number | null {
  const maxDays = policy.maxExpiresInDays
  if (lifetime === 'default') return now + policy.defaultExpiresInDays * DAY_MS
  if (lifetime === 'never') {
    if (maxDays > 0) {
      throw new OperationRefused(
        'lifetime_exceeded',
        'never',
        `a token that never expires is not allowed: the PAT lifetime is limited to ${maxDays} days (config pat.maxExpiresInDays)`,
      )
    }
    return null
  }
  if (!(Number.isFinite(lifetime) && lifetime > 0)) {
    throw new OperationRefused('invalid_input', 'lifetime', 'a token lifetime must be positive')
  }
  if (maxDays > 0 && lifetime > maxDays * DAY_MS) {
    throw new OperationRefused(
      'lifetime_exceeded',
      String(lifetime),
      `the lifetime is longer than the maximum PAT lifetime of ${maxDays} days (config pat.maxExpiresInDays)`,
    )
  }
  return now + lifetime
}

export interface IssuePatRequest {
  readonly tenantId: string
  readonly subject: string
  readonly name: string
  readonly permissions: readonly string[]
  readonly lifetime: PatLifetime
}

/** A new token: `token` is the plaintext, to be shown once and never stored. */
export interface IssuedPat {
  readonly token: string
  readonly record: PatRecord
}

/** Issues a PAT for an enabled tenant, within the lifetime policy, and audits `pat.issued`. */
export async function issueTenantPat(
  deps: PatOperationDeps,
  request: IssuePatRequest,
): Promise<IssuedPat> {
  const now = deps.clock.now()
  const expiresAt = expiryUnderPolicy(deps.patPolicy, now, request.lifetime)
  await requireEnabledTenant(deps.store, request.tenantId)
  const issued = issuePat({
    tenantId: request.tenantId,
    subject: request.subject,
    name: request.name,
    permissions: request.permissions,
    expiresAt,
    now,
  })
  await deps.store.insertPat(issued.record)
  await audit(deps, {
    type: 'pat.issued',
    tenantId: request.tenantId,
    details: {
      tokenId: issued.record.id,
      subject: request.subject,
      name: request.name,
      permissions: request.permissions,
      expiresAt: iso(expiresAt),
    },
  })
  return issued
}

export interface RotatePatRequest {
  readonly id: string
  readonly lifetime: PatLifetime
  /** How long the old token keeps working; 0 refuses it at once. */
  readonly graceMs: number
}

/**
 * Replaces a current token with a new one (same tenant, subject, name, permissions) in one
 * atomic store step, and audits `pat.rotated`. Refused for a revoked or already-rotated
 * token, or a disabled tenant.
 */
export async function rotateTenantPat(
  deps: PatOperationDeps,
  request: RotatePatRequest,
): Promise<IssuedPat & { readonly graceUntil: number }> {
  const { store } = deps
  const now = deps.clock.now()
  const expiresAt = expiryUnderPolicy(deps.patPolicy, now, request.lifetime)
  const old = await store.getPat(request.id)
  if (!old) {
    throw new OperationRefused('token_unknown', shown(request.id), `no token ${shown(request.id)}`)
  }
  if (old.revokedAt !== null) {
    throw new OperationRefused('token_revoked', old.id, `${old.id} is revoked`, {
      at: old.revokedAt,
    })
  }
  if (old.supersededAt != null) {
    throw new OperationRefused('token_rotated', old.id, `${old.id} was already rotated`, {
      at: old.supersededAt,
      tenantId: old.tenantId,
    })
  }
  await requireEnabledTenant(store, old.tenantId)
  const issued = issuePat({
    tenantId: old.tenantId,
    subject: old.subject,
    name: old.name,
    permissions: old.permissions,
    expiresAt,
    now,
    rotatedFrom: old.id,
  })
  const graceUntil = now + request.graceMs
  if (!(await store.rotatePat(old.id, issued.record, now, graceUntil))) {
    throw new OperationRefused(
      'token_changed',
      old.id,
      `${old.id} was revoked or rotated meanwhile`,
    )
  }
  await audit(deps, {
    type: 'pat.rotated',
    tenantId: old.tenantId,
    details: {
      tokenId: issued.record.id,
      rotatedFrom: old.id,
      graceUntil: iso(graceUntil),
      expiresAt: iso(expiresAt),
    },
  })
  return { ...issued, graceUntil }
}

/**
 * The stored token a reference names: its id (`tok_...`), or the token itself (`pat_...`),
 * looked up by hash exactly as authentication does; the plaintext is never echoed.
 */
export async function findPatByRef(store: PatStore, ref: string): Promise<PatRecord> {
  if (isPatToken(ref)) {
    const found = checkPatFormat(ref).ok ? await store.findPatByHash(hashPat(ref)) : undefined
    if (!found) throw new OperationRefused('token_unknown', fingerprintToken(ref), 'no such token')
    return found
  }
  const found = await store.getPat(ref)
  if (!found) throw new OperationRefused('token_unknown', ref, `no token ${ref}`)
  return found
}

/**
 * Revokes a token by id (idempotent: `changed` is false when it was already revoked) and
 * audits `pat.revoked` when it changed. `tenantId` restricts the lookup to one tenant (the
 * API's caller): a token of another tenant is reported unknown, like one that does not exist.
 */
export async function revokeTenantPat(
  deps: OperationDeps,
  id: string,
  options: { readonly tenantId?: string | undefined; readonly self?: boolean | undefined } = {},
): Promise<{ readonly record: PatRecord; readonly changed: boolean }> {
  const found = await deps.store.getPat(id)
  if (!found || (options.tenantId !== undefined && found.tenantId !== options.tenantId)) {
    throw new OperationRefused('token_unknown', shown(id), `no token ${shown(id)}`)
  }
  if (found.revokedAt !== null) return { record: found, changed: false }
  const revoked = await deps.store.revokePat(found.id, deps.clock.now())
  if (!revoked) throw new OperationRefused('token_unknown', found.id, `no token ${found.id}`)
  await audit(deps, {
    type: 'pat.revoked',
    tenantId: found.tenantId,
    details:
      options.self === undefined
        ? { tokenId: found.id, subject: found.subject }
        : { tokenId: found.id, self: options.self },
  })
  return { record: revoked, changed: true }
}

/** What `revokeLeakedPats` did with one plaintext token. */
export type LeakOutcome = 'revoked' | 'already_revoked' | 'unknown' | 'not_a_pat'

export interface LeakResult {
  /** `pat_…last4`: all that is ever shown or stored of a leaked token. */
  readonly fingerprint: string
  readonly outcome: LeakOutcome
  readonly record: PatRecord | undefined
}

/**
 * Revokes tokens found in plaintext (secret-scanning alerts), each audited as
 * `pat.leak_revoked` with its fingerprint, never the token.
 */
export async function revokeLeakedPats(
  deps: OperationDeps,
  tokens: readonly string[],
): Promise<LeakResult[]> {
  const results: LeakResult[] = []
  for (const token of tokens) {
    const fingerprint = fingerprintToken(token)
    if (!checkPatFormat(token).ok) {
      results.push({ fingerprint, outcome: 'not_a_pat', record: undefined })
      continue
    }
    const found = await deps.store.findPatByHash(hashPat(token))
    if (!found) {
      results.push({ fingerprint, outcome: 'unknown', record: undefined })
      continue
    }
    if (found.revokedAt !== null) {
      results.push({ fingerprint, outcome: 'already_revoked', record: found })
      continue
    }
    const revoked = (await deps.store.revokePat(found.id, deps.clock.now())) ?? found
    await audit(deps, {
      type: 'pat.leak_revoked',
      tenantId: found.tenantId,
      details: { tokenId: found.id, fingerprint, subject: found.subject },
    })
    results.push({ fingerprint, outcome: 'revoked', record: revoked })
  }
  return results
}

export interface PatSearch {
  /** Only unrevoked tokens expiring before this time (epoch ms). */
  readonly expiringBefore?: number | undefined
  /** Only tokens whose status (now) is one of these. */
  readonly status?: readonly ReturnType<typeof patStatus>[] | undefined
  /** Case-insensitive substring of the name or subject. */
  readonly text?: string | undefined
}

/** Every PAT of a tenant matching `search`, newest first (all pages). */
export async function listTenantPats(
  deps: Pick<OperationDeps, 'store' | 'clock'>,
  tenantId: string,
  search: PatSearch = {},
  pageSize = 500,
): Promise<PatRecord[]> {
  if (!(await deps.store.findTenant(tenantId))) {
    throw new OperationRefused('tenant_unknown', tenantId, `no tenant ${tenantId}`)
  }
  const filter =
    search.expiringBefore === undefined ? undefined : { expiringBefore: search.expiringBefore }
  const now = deps.clock.now()
  const text = search.text?.toLowerCase()
  const all: PatRecord[] = []
  let cursor: string | undefined
  do {
    const page = await deps.store.listPats(tenantId, { limit: pageSize, cursor }, filter)
    for (const record of page.items) {
      if (search.status && !search.status.includes(patStatus(record, now))) continue
      if (
        text &&
        !record.name.toLowerCase().includes(text) &&
        !record.subject.toLowerCase().includes(text)
      )
        continue
      all.push(record)
    }
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  return all
}

/** A PAT's metadata as the CLI's JSON and the admin API show it: never the token or its hash. */
export function patMetadata(record: PatRecord, now: number) {
  return {
    id: record.id,
    tenantId: record.tenantId,
    subject: record.subject,
    name: record.name,
    permissions: record.permissions,
    last4: record.last4,
    status: patStatus(record, now),
    createdAt: iso(record.createdAt),
    expiresAt: iso(record.expiresAt),
    lastUsedAt: iso(record.lastUsedAt),
    revokedAt: iso(record.revokedAt),
    rotatedFrom: record.rotatedFrom,
    supersededAt: iso(record.supersededAt),
    graceUntil: iso(record.graceUntil),
  }
}
