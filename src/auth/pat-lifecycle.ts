import { isCertificateThumbprint } from '../core/certificate-binding.ts'
import { fingerprintToken } from '../core/fingerprint.ts'
import { checkPatFormat, hashPat, isPatToken, issuePat, patStatus } from '../core/pat.ts'
import type { PatRecord, Quota, QuotaRefill, RateLimitOverride } from '../core/ports.ts'
import { withDiskReserve } from '../stores/disk-reserve.ts'
import type {
  PatChanges,
  PatStore,
  QuotaStore,
  StoreTransaction,
  TransactionalStore,
} from '../stores/store.ts'
import {
  badValue,
  checkExternalId,
  checkKeyName,
  checkKeyPermissions,
  checkMetadata,
  checkQuotaSpec,
  checkRateLimit,
  type QuotaSpec,
  quotaFrom,
} from './key-fields.ts'
import { audit, type OperationDeps, OperationRefused, requireEnabledTenant } from './operations.ts'

export { type PatStatus, patStatus } from '../core/pat.ts'

const iso = (ms: number | null | undefined) => (ms == null ? null : new Date(ms).toISOString())

/** A token reference as it may be shown: a plaintext token given as an id is fingerprinted. */
const shown = (ref: string) => (isPatToken(ref) ? fingerprintToken(ref) : ref)

const DAY_MS = 86_400_000

/**
 * The longest rotation grace: an old token that keeps working for longer than this is no
 * rotation. The one home of the limit: the CLI, admin API, console, apply and library callers
 * pass their value to `checkRotationGrace` and word its refusal's `limit` in their own unit.
 */
export const MAX_ROTATION_GRACE_MS = 30 * DAY_MS

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
  const limit = { field: 'lifetime', maxMs: maxDays * DAY_MS }
  if (lifetime === 'default') return now + policy.defaultExpiresInDays * DAY_MS
  if (lifetime === 'never') {
    if (maxDays > 0) {
      throw new OperationRefused(
        'lifetime_exceeded',
        'never',
        `a token that never expires is not allowed: the PAT lifetime is limited to ${maxDays} days (config pat.maxExpiresInDays)`,
        { limit },
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
      { limit },
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
  /** The key's own request rate; omitted: the configured default. */
  readonly rateLimit?: RateLimitOverride | undefined
  /** A quota of uses (without refill: none); omitted: no quota. */
  readonly quota?: QuotaEdit | undefined
  readonly metadata?: Readonly<Record<string, unknown>> | undefined
  readonly externalId?: string | undefined
  /** Binds the key to one client certificate (its `x5t#S256`, RFC 8705); omitted: not bound. */
  readonly certificateThumbprint?: string | undefined
}

/**
 * A quota as an operator states it. Without `refill`, an edit keeps the key's refill (and
 * interval): `--quota 20` on a monthly quota is 20 a month, not 20 for the key's lifetime; a
 * new key's quota without one has no refill.
 */
export interface QuotaEdit {
  readonly limit: number
  readonly refill?: QuotaRefill | undefined
  readonly intervalSec?: number | undefined
}

/** `edit` as a whole quota spec against the key's `current` quota, and the refill it kept. */
export function resolveQuotaEdit(
  edit: QuotaEdit,
  current: Quota | null | undefined,
): { readonly spec: QuotaSpec; readonly keptRefill: string | undefined } {
  if (edit.refill !== undefined || !current) {
    return {
      spec: checkQuotaSpec({ ...edit, refill: edit.refill ?? 'none' }),
      keptRefill: undefined,
    }
  }
  const spec = checkQuotaSpec({
    limit: edit.limit,
    refill: current.refill,
    ...(current.refill === 'interval' ? { intervalSec: current.intervalSec } : {}),
  })
  const keptRefill =
    current.refill === 'none'
      ? undefined
      : current.refill === 'interval'
        ? `every ${current.intervalSec}s`
        : current.refill
  return { spec, keptRefill }
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
  const rateLimit = request.rateLimit === undefined ? null : checkRateLimit(request.rateLimit)
  const quotaSpec =
    request.quota === undefined ? undefined : resolveQuotaEdit(request.quota, null).spec
  const metadata = request.metadata === undefined ? null : checkMetadata(request.metadata)
  const externalId = request.externalId === undefined ? null : checkExternalId(request.externalId)
  const certificateThumbprint =
    request.certificateThumbprint === undefined
      ? null
      : checkCertificateThumbprint(request.certificateThumbprint)
  await requireEnabledTenant(deps.store, request.tenantId)
  const issued = issuePat({
    tenantId: request.tenantId,
    subject: request.subject,
    name: request.name,
    permissions: request.permissions,
    expiresAt,
    now,
  })
  const record: PatRecord = {
    ...issued.record,
    supersededAt: null,
    graceUntil: null,
    disabledAt: null,
    rateLimit,
    quota: quotaSpec && quotaFrom(quotaSpec, issued.record.id, null, now),
    metadata,
    externalId,
    certificateThumbprint,
  }
  await deps.store.insertPat(record)
  await audit(deps, {
    type: 'pat.issued',
    tenantId: request.tenantId,
    details: {
      tokenId: record.id,
      subject: request.subject,
      name: request.name,
      permissions: request.permissions,
      expiresAt: iso(expiresAt),
      ...productDetails(record),
    },
  })
  return { token: issued.token, record }
}

/** The product fields of a key that has them, for audit details (omitted when unset). */
function productDetails(record: PatRecord): Record<string, unknown> {
  const details: Record<string, unknown> = {}
  if (record.rateLimit) details.rateLimit = record.rateLimit
  if (record.quota) details.quota = quotaDetails(record.quota)
  if (record.metadata) details.metadata = record.metadata
  if (record.externalId) details.externalId = record.externalId
  if (record.certificateThumbprint) details.certificateThumbprint = record.certificateThumbprint
  return details
}

/**
 * A certificate binding as an operator gives it: the base64url SHA-256 of the DER certificate
 * (`x5t#S256`, 43 characters, as RFC 8705 writes it). Anything else is refused rather than
 * stored as a binding no certificate can ever match.
 */
export function checkCertificateThumbprint(value: string): string {
  if (!isCertificateThumbprint(value)) {
    throw badValue(
      'certificate thumbprint',
      value,
      'the base64url SHA-256 of the DER certificate (x5t#S256: 43 characters of A-Z a-z 0-9 - _)',
    )
  }
  return value
}

const quotaDetails = (quota: NonNullable<PatRecord['quota']>) => ({
  limit: quota.limit,
  refill: quota.refill,
  ...(quota.intervalSec === undefined ? {} : { intervalSec: quota.intervalSec }),
})

export interface RotatePatRequest {
  readonly id: string
  readonly lifetime: PatLifetime
  /** How long the old token keeps working: 0 (refused at once) to `MAX_ROTATION_GRACE_MS`. */
  readonly graceMs: number
}

/**
 * A rotation grace within 0 to `MAX_ROTATION_GRACE_MS`, else `invalid_input` naming it, with
 * the bound as its `limit` (NaN for a value that is no number of the caller's unit).
 */
export function checkRotationGrace(graceMs: number): number {
  if (!(Number.isSafeInteger(graceMs) && graceMs >= 0 && graceMs <= MAX_ROTATION_GRACE_MS)) {
    throw new OperationRefused(
      'invalid_input',
      'grace',
      `grace: ${String(graceMs)} ms is not valid; expected 0 to ${MAX_ROTATION_GRACE_MS / DAY_MS} days`,
      { limit: { field: 'grace', maxMs: MAX_ROTATION_GRACE_MS } },
    )
  }
  return graceMs
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
  const graceMs = checkRotationGrace(request.graceMs)
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
  if (old.disabledAt != null) {
    throw new OperationRefused(
      'token_disabled',
      old.id,
      `${old.id} is disabled; enable it before rotating it`,
      { at: old.disabledAt, tenantId: old.tenantId },
    )
  }
  await requireEnabledTenant(store, old.tenantId)
  const replacement = issuePat({
    tenantId: old.tenantId,
    subject: old.subject,
    name: old.name,
    permissions: old.permissions,
    expiresAt,
    now,
    rotatedFrom: old.id,
  })
  // The replacement is the same key to its owner: its limits, metadata and external id, and
  // its quota counted in the same counter (a rotation must not refill a quota).
  const issued = {
    token: replacement.token,
    record: {
      ...replacement.record,
      rateLimit: old.rateLimit ?? null,
      quota: old.quota ?? null,
      metadata: old.metadata ?? null,
      externalId: old.externalId ?? null,
      // A bound key stays bound: rotating must not drop the proof of possession.
      certificateThumbprint: old.certificateThumbprint ?? null,
    },
  }
  const graceUntil = now + graceMs
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

/** An operator's change to a key; an omitted field stays as it is, null clears it. */
export interface PatEdit {
  readonly name?: string | undefined
  readonly permissions?: readonly string[] | undefined
  /** The new expiry (epoch ms) or `never`; measured against the maximum from its creation. */
  readonly expiresAt?: number | 'never' | undefined
  readonly rateLimit?: RateLimitOverride | null | undefined
  /** The family's quota; without `refill` the current refill is kept (`QuotaEdit`). */
  readonly quota?: QuotaEdit | null | undefined
  /** Forgets the uses counted so far: the quota starts again from zero now. */
  readonly resetQuotaUsage?: boolean | undefined
  readonly metadata?: Readonly<Record<string, unknown>> | null | undefined
  readonly externalId?: string | null | undefined
  /** The client certificate the key is bound to (`x5t#S256`); null unbinds it. */
  readonly certificateThumbprint?: string | null | undefined
}

/** What an edit did: the key after it, whether anything changed, and what to tell the operator. */
export interface PatEdited {
  readonly record: PatRecord
  readonly changed: boolean
  /**
   * What the edit did beyond the fields given: `quota: refill monthly kept`, `also applied
   * to its rotation family: tok_a` (the other keys it changed). Empty when nothing needs saying.
   */
  readonly notes: readonly string[]
  /** The refill an edit of the quota limit kept (`monthly`, `every 3600s`), if it did. */
  readonly keptRefill?: string | undefined
}

/**
 * The store an edit runs on: the operations' store, quota resets (a `Store` or one of its
 * transactions has them; only `resetQuotaUsage` needs them), and outside a transaction
 * `transaction`, so that a key and its rotation family change together.
 */
type EditStore = OperationDeps['store'] &
  Partial<Pick<QuotaStore, 'resetQuota'> & Pick<TransactionalStore, 'transaction'>>
type EditDeps = PatOperationDeps & { readonly store: EditStore }

/**
 * Edits a key (name, permissions, expiry within the lifetime policy, rate limit, quota,
 * metadata, external id) in one atomic store step, and audits `pat.updated` with the changed
 * fields before and after. Every instance drops its cached copy on the store's `pat_changed`.
 * The expiry is checked from the key's creation: repeated edits cannot outlive the maximum
 * lifetime (rotate instead). Refused for an unknown or revoked key, or a bad value
 * (`invalid_input`, naming the field and the value).
 *
 * A rotation family (the current key and its predecessors in grace) shares one quota: a
 * quota edit or reset of any of them applies to all of them, in the same transaction, so
 * an old token in grace can never spend more than the quota the operator set.
 */
export async function editTenantPat(
  deps: EditDeps,
  id: string,
  edit: PatEdit,
  options: { readonly tenantId?: string | undefined } = {},
): Promise<PatEdited> {
  const now = deps.clock.now()
  const current = await currentPat(deps.store, id, options.tenantId)
  const changes: { -readonly [K in keyof PatChanges]: PatChanges[K] } = {}
  let keptRefill: string | undefined
  if (edit.name !== undefined) changes.name = checkKeyName(edit.name)
  if (edit.permissions !== undefined) changes.permissions = checkKeyPermissions(edit.permissions)
  if (edit.expiresAt !== undefined) changes.expiresAt = editedExpiry(deps, current, edit.expiresAt)
  if (edit.rateLimit !== undefined) {
    changes.rateLimit = edit.rateLimit === null ? null : checkRateLimit(edit.rateLimit)
  }
  if (edit.quota === null) changes.quota = null
  else if (edit.quota !== undefined) {
    const resolved = resolveQuotaEdit(edit.quota, current.quota)
    keptRefill = resolved.keptRefill
    changes.quota = quotaFrom(
      resolved.spec,
      current.quota?.counter ?? current.id,
      current.quota,
      now,
    )
  }
  if (edit.metadata !== undefined) {
    changes.metadata = edit.metadata === null ? null : checkMetadata(edit.metadata)
  }
  if (edit.externalId !== undefined) {
    changes.externalId = edit.externalId === null ? null : checkExternalId(edit.externalId)
  }
  if (edit.certificateThumbprint !== undefined) {
    changes.certificateThumbprint =
      edit.certificateThumbprint === null
        ? null
        : checkCertificateThumbprint(edit.certificateThumbprint)
  }
  const quota = changes.quota === undefined ? current.quota : changes.quota
  const reset = edit.resetQuotaUsage === true && quota != null
  const differs = changedFields(current, changes)
  if (reset && quota) changes.quota = { ...quota, resetAt: now }
  // The family's other keys whose quota is not the one this edit leaves.
  const relatives =
    changes.quota === undefined
      ? []
      : (await familyInUse(deps.store, current, now)).filter(
          (k) => canonical(k.quota ?? null) !== canonical(changes.quota),
        )
  if (differs.length === 0 && !reset && relatives.length === 0) {
    return { record: current, changed: false, notes: [] }
  }
  const after = await atomically(deps.store, relatives.length > 0, async (store) => {
    // The count goes first, then the keys: a key's change (a new `resetAt`) is what makes
    // every instance drop the uses it had reserved under the old count.
    if (reset && quota) {
      const quotas: Partial<Pick<QuotaStore, 'resetQuota'>> = store
      if (!quotas.resetQuota) throw new Error('bug: a quota reset needs the quota store')
      await quotas.resetQuota(quota.counter)
    }
    for (const relative of relatives) {
      await updateOrRefuse(store, relative.id, { quota: changes.quota })
    }
    if (differs.length === 0 && !reset) return current
    return (await updateOrRefuse(store, current.id, changes)).after
  })
  await audit(deps, {
    type: 'pat.updated',
    tenantId: current.tenantId,
    details: {
      tokenId: current.id,
      before: fieldsOf(current, differs),
      after: fieldsOf(after, differs),
      ...(reset ? { quotaUsageReset: true } : {}),
      ...(relatives.length > 0 ? { family: relatives.map((k) => k.id) } : {}),
    },
  })
  const notes = [
    ...(keptRefill === undefined ? [] : [`quota: refill ${keptRefill} kept`]),
    ...(relatives.length > 0
      ? [`also applied to its rotation family: ${relatives.map((k) => k.id).join(', ')}`]
      : []),
  ]
  return { record: after, changed: true, notes, keptRefill }
}

/**
 * Disables a key (refused with 401 like an invalid token, everywhere within a second) or
 * enables it again, without revoking it, together with its rotation family (the current key
 * and its predecessors in grace share one enabled state). Idempotent: `changed` is false,
 * and nothing is audited, when all of them already were in that state; audited as
 * `pat.disabled` / `pat.enabled` per key changed.
 */
export async function setPatDisabled(
  deps: OperationDeps & { readonly store: OperationDeps['store'] & Partial<TransactionalStore> },
  id: string,
  disabled: boolean,
  options: { readonly tenantId?: string | undefined } = {},
): Promise<PatEdited> {
  const now = deps.clock.now()
  const current = await currentPat(deps.store, id, options.tenantId)
  const family = [current, ...(await familyInUse(deps.store, current, now))]
  const toChange = family.filter((k) => (k.disabledAt != null) !== disabled)
  if (toChange.length === 0) return { record: current, changed: false, notes: [] }
  // On a full disk the disk reserve is given up for it (disk-reserve.ts): a disable must land.
  const changed = await withDiskReserve(deps.store, () =>
    atomically(deps.store, toChange.length > 1, async (store) => {
      const out: PatRecord[] = []
      for (const key of toChange) {
        out.push((await updateOrRefuse(store, key.id, { disabledAt: disabled ? now : null })).after)
      }
      return out
    }),
  )
  for (const key of toChange) {
    await withDiskReserve(deps.store, () =>
      audit(deps, {
        type: disabled ? 'pat.disabled' : 'pat.enabled',
        tenantId: key.tenantId,
        details: { tokenId: key.id, subject: key.subject },
      }),
    )
  }
  const relatives = toChange.filter((k) => k.id !== current.id).map((k) => k.id)
  return {
    record: changed.find((k) => k.id === current.id) ?? current,
    changed: true,
    notes:
      relatives.length > 0 ? [`also applied to its rotation family: ${relatives.join(', ')}`] : [],
  }
}

/**
 * The other keys of `key`'s rotation family that still work or may again: unrevoked, and
 * current or within their grace. Predecessors past their grace are refused for good.
 */
async function familyInUse(store: PatStore, key: PatRecord, now: number): Promise<PatRecord[]> {
  if (key.rotatedFrom === null && key.supersededAt == null) return []
  const family = await store.listPatFamily(key.id)
  return family.filter(
    (k) =>
      k.id !== key.id &&
      k.revokedAt === null &&
      (k.supersededAt == null || (k.graceUntil ?? 0) > now),
  )
}

/** `work` in one store transaction when `together` and the store can start one. */
function atomically<S extends object, T>(
  store: S & Partial<Pick<TransactionalStore, 'transaction'>>,
  together: boolean,
  work: (store: S | StoreTransaction) => Promise<T>,
): Promise<T> {
  return together && store.transaction ? store.transaction((tx) => work(tx)) : work(store)
}

/** `updatePat`, or `token_changed` when the key was revoked meanwhile. */
async function updateOrRefuse(store: PatStore, id: string, changes: PatChanges) {
  const result = await store.updatePat(id, changes)
  if (!result) throw new OperationRefused('token_changed', id, `${id} was revoked meanwhile`)
  return result
}

/** An unrevoked key by id (within `tenantId`, when given), else the refusal. */
async function currentPat(
  store: PatStore,
  id: string,
  tenantId: string | undefined,
): Promise<PatRecord> {
  const found = await store.getPat(id)
  if (!found || (tenantId !== undefined && found.tenantId !== tenantId)) {
    throw new OperationRefused('token_unknown', shown(id), `no token ${shown(id)}`)
  }
  if (found.revokedAt !== null) {
    throw new OperationRefused('token_revoked', found.id, `${found.id} is revoked`, {
      at: found.revokedAt,
      tenantId: found.tenantId,
    })
  }
  return found
}

/** A new expiry: in the future, and within the maximum lifetime counted from creation. */
function editedExpiry(
  deps: PatOperationDeps,
  record: PatRecord,
  expiresAt: number | 'never',
): number | null {
  if (expiresAt === 'never') return expiryUnderPolicy(deps.patPolicy, record.createdAt, 'never')
  if (!(Number.isFinite(expiresAt) && expiresAt > deps.clock.now())) {
    throw new OperationRefused(
      'invalid_input',
      'expiry',
      `expiry: ${iso(Number.isFinite(expiresAt) ? expiresAt : null) ?? String(expiresAt)} is not valid; expected a time in the future`,
    )
  }
  return expiryUnderPolicy(deps.patPolicy, record.createdAt, expiresAt - record.createdAt)
}

const EDITABLE = [
  'name',
  'permissions',
  'expiresAt',
  'rateLimit',
  'quota',
  'metadata',
  'externalId',
  'certificateThumbprint',
] as const
type Editable = (typeof EDITABLE)[number]

/** The editable fields whose value `changes` would change (objects compared by content). */
function changedFields(record: PatRecord, changes: PatChanges): Editable[] {
  return EDITABLE.filter(
    (key) =>
      changes[key] !== undefined && canonical(changes[key]) !== canonical(record[key] ?? null),
  )
}

/** JSON with object keys sorted: equal values give equal text whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  )
}

/** The given fields of a key, as audit details show them (times in ISO 8601). */
function fieldsOf(record: PatRecord, keys: readonly Editable[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const key of keys) {
    const value = record[key] ?? null
    out[key] =
      key === 'expiresAt'
        ? iso(value as number | null)
        : key === 'quota' && value !== null
          ? quotaDetails(value as NonNullable<PatRecord['quota']>)
          : value
  }
  return out
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
  // On a full disk the disk reserve is given up for it (disk-reserve.ts): a revocation must land.
  const at = deps.clock.now()
  const revoked = await withDiskReserve(deps.store, () => deps.store.revokePat(found.id, at))
  if (!revoked) throw new OperationRefused('token_unknown', found.id, `no token ${found.id}`)
  await withDiskReserve(deps.store, () =>
    audit(deps, {
      type: 'pat.revoked',
      tenantId: found.tenantId,
      details:
        options.self === undefined
          ? { tokenId: found.id, subject: found.subject }
          : { tokenId: found.id, self: options.self },
    }),
  )
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

/** A token found in plaintext, and who found it where (a secret scanner's report). */
export interface LeakedToken {
  readonly token: string
  /** The reporter, e.g. `github`; absent: an operator. */
  readonly source?: string | undefined
  /** Where it was found (a public URL). */
  readonly url?: string | undefined
}

/**
 * Revokes tokens found in plaintext (secret-scanning alerts), each audited as
 * `pat.leak_revoked` with its fingerprint (and the reporter and place, when given), never the
 * token. Idempotent: a token already revoked is reported so and not audited again.
 */
export async function revokeLeakedPats(
  deps: OperationDeps,
  leaks: readonly (string | LeakedToken)[],
): Promise<LeakResult[]> {
  const results: LeakResult[] = []
  for (const leak of leaks) {
    const { token, source, url } = typeof leak === 'string' ? { token: leak } : leak
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
    const at = deps.clock.now()
    const revoked =
      (await withDiskReserve(deps.store, () => deps.store.revokePat(found.id, at))) ?? found
    await withDiskReserve(deps.store, () =>
      audit(deps, {
        type: 'pat.leak_revoked',
        tenantId: found.tenantId,
        details: {
          tokenId: found.id,
          fingerprint,
          subject: found.subject,
          ...(source === undefined ? {} : { source }),
          ...(url === undefined ? {} : { url }),
        },
      }),
    )
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
    disabledAt: iso(record.disabledAt),
    rateLimit: record.rateLimit ?? null,
    quota: record.quota ? quotaDetails(record.quota) : null,
    metadata: record.metadata ?? null,
    externalId: record.externalId ?? null,
    certificateThumbprint: record.certificateThumbprint ?? null,
  }
}
