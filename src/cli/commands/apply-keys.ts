/**
 * `apply`'s `keys:` entries: the settings of keys that already exist (a key is created once and
 * its secret shown once, so apply never creates, revokes or prunes one). Each entry is turned
 * into the `pat edit` (and `pat enable|disable`) options an operator would type and checked by
 * that command's own rules; the fields `export` writes only to describe a key (tenant, subject,
 * last4, times) must match the stored key, so a file can neither edit them silently nor name
 * another key by mistake.
 */

import type { QuotaSpec } from '../../auth/key-fields.ts'
import {
  checkCertificateThumbprint,
  editTenantPat,
  type PatEdit,
  resolveQuotaEdit,
  setPatDisabled,
} from '../../auth/pat-lifecycle.ts'
import type { Config } from '../../config/schema.ts'
import type { PatRecord, Quota } from '../../core/ports.ts'
import type { Store } from '../../stores/store.ts'
import { parseCommandArgs } from '../args.ts'
import { UsageError } from '../errors.ts'
import {
  CLEAR_OPTIONS,
  editedField,
  formatRate,
  formatRefill,
  KEY_OPTIONS,
  metadataOption,
  quotaOption,
  rateLimitOption,
} from '../key-options.ts'
import { isoTime } from '../output.ts'
import {
  type ApplyChange,
  canonicalJson,
  rateLimitArgs,
  sameRate,
  switchChange,
} from './apply-change.ts'

/** The keys of a `keys:` entry: what apply changes, then what only describes the key. */
export const KEY_ENTRY_FIELDS = [
  'id',
  'name',
  'permissions',
  'enabled',
  'rateLimit',
  'quota',
  'metadata',
  'externalId',
  'certificateThumbprint',
  'tenant',
  'subject',
  'last4',
  'createdAt',
  'expiresAt',
  'revokedAt',
] as const

const DESCRIBING = ['tenant', 'subject', 'last4', 'createdAt', 'expiresAt', 'revokedAt'] as const

/** `pat edit`'s options by the entry key that states them, for messages. */
const FILE_KEY_OF: Readonly<Record<string, string>> = {
  '--rate-limit': 'rateLimit',
  '--quota': 'quota.limit',
  '--quota-refill': 'quota.refill',
  '--metadata': 'metadata',
  '--external-id': 'externalId',
}

/** A `keys:` entry as read from the file (shape checked), with where it is for messages. */
export interface KeyEntry {
  readonly at: string
  readonly value: Readonly<Record<string, unknown>>
}

interface DesiredKey {
  readonly at: string
  readonly id: string
  readonly edit: PatEdit
  readonly enabled: boolean | undefined
  readonly describing: Readonly<Record<string, unknown>>
}

/** Reads an entry's settings with `pat edit`'s own option rules; throws with the entry's place. */
export function desiredKey(entry: KeyEntry): DesiredKey {
  const { at, value } = entry
  const fail = (message: string): never => {
    throw new UsageError(`${at}: ${message}`)
  }
  if (typeof value.id !== 'string' || value.id === '') return fail('id: required')
  const argv: string[] = []
  if (value.name !== undefined && typeof value.name !== 'string') fail('name: expected a string')
  if (value.rateLimit === 'default') argv.push('--clear-rate-limit')
  else if (typeof value.rateLimit === 'string') argv.push('--rate-limit', value.rateLimit)
  else if (value.rateLimit !== undefined)
    fail('rateLimit: expected N/WINDOW (e.g. 100/1m) or default')
  if (value.quota === 'none' || value.quota === null) argv.push('--clear-quota')
  else if (value.quota !== undefined) {
    const quota = value.quota as Record<string, unknown>
    if (typeof quota !== 'object' || Array.isArray(quota)) {
      fail('quota: expected { limit: N, refill: none|daily|monthly|DURATION } or none')
    }
    for (const key of Object.keys(quota)) {
      if (key !== 'limit' && key !== 'refill') fail(`quota: unknown key ${key}`)
    }
    argv.push('--quota', String(quota.limit))
    if (quota.refill !== undefined) argv.push('--quota-refill', String(quota.refill))
  }
  if (value.metadata === null) argv.push('--clear-metadata')
  else if (value.metadata !== undefined) argv.push('--metadata', JSON.stringify(value.metadata))
  if (value.externalId === null) argv.push('--clear-external-id')
  else if (value.externalId !== undefined) {
    if (typeof value.externalId !== 'string') fail('externalId: expected a string or null')
    argv.push('--external-id', value.externalId as string)
  }
  let certificateThumbprint: string | null | undefined
  if (value.certificateThumbprint === null) certificateThumbprint = null
  else if (value.certificateThumbprint !== undefined) {
    if (typeof value.certificateThumbprint !== 'string') {
      fail('certificateThumbprint: expected a string (x5t#S256) or null')
    }
    try {
      certificateThumbprint = checkCertificateThumbprint(value.certificateThumbprint as string)
    } catch (error) {
      fail((error as Error).message.replace(/^certificate thumbprint/, 'certificateThumbprint'))
    }
  }
  if (value.enabled !== undefined && typeof value.enabled !== 'boolean') {
    fail('enabled: must be true or false')
  }
  let permissions: readonly string[] | undefined
  if (value.permissions !== undefined) {
    if (!Array.isArray(value.permissions) || value.permissions.some((p) => typeof p !== 'string')) {
      fail('permissions: expected a list of strings')
    }
    permissions = value.permissions as string[]
  }
  let edit: PatEdit
  try {
    const args = parseCommandArgs(argv, { ...KEY_OPTIONS, ...CLEAR_OPTIONS }, 0)
    edit = {
      name: value.name as string | undefined,
      permissions,
      rateLimit: editedField(args, 'rate-limit', rateLimitOption(args)),
      quota: editedField(args, 'quota', quotaOption(args)),
      metadata: editedField(args, 'metadata', metadataOption(args)),
      externalId: editedField(
        args,
        'external-id',
        typeof value.externalId === 'string' ? value.externalId : undefined,
      ),
      certificateThumbprint,
    }
  } catch (error) {
    // The command's messages name its options; the file's reader knows the file's keys.
    return fail((error as Error).message.replace(/--[a-z-]+/g, (o) => FILE_KEY_OF[o] ?? o))
  }
  const describing: Record<string, unknown> = {}
  for (const key of DESCRIBING) if (value[key] !== undefined) describing[key] = value[key]
  return { at, id: value.id, edit, enabled: value.enabled as boolean | undefined, describing }
}

/** What applying `entries` changes, each refusal found before the first write. */
export async function keyChanges(
  store: Pick<Store, 'getPat'>,
  entries: readonly KeyEntry[],
  patPolicy: Config['pat'],
): Promise<ApplyChange[]> {
  const changes: ApplyChange[] = []
  for (const entry of entries) {
    const key = desiredKey(entry)
    const record = await store.getPat(key.id)
    if (!record) {
      throw new UsageError(
        `${key.at}: no key ${key.id} (apply never creates keys: issue one with pat issue)`,
      )
    }
    const described = keyEntryOf(record)
    for (const [field, stated] of Object.entries(key.describing)) {
      const stored = described[field]
      if (stated !== stored) {
        throw new UsageError(
          `${key.at}: ${field} is ${JSON.stringify(stated)} in the file but ${JSON.stringify(stored)} for ${key.id}; apply does not change it${field === 'expiresAt' ? ' (use pat edit --expires-at)' : ''}`,
        )
      }
    }
    const edit = differences(key.edit, record)
    const switched = key.enabled !== undefined && key.enabled !== (record.disabledAt == null)
    if ((Object.keys(edit).length > 0 || switched) && record.revokedAt !== null) {
      throw new UsageError(`${key.at}: ${key.id} is revoked; a revoked key cannot be changed`)
    }
    if (Object.keys(edit).length > 0) changes.push(keyEdit(key.id, edit, patPolicy))
    if (switched) {
      const enabled = key.enabled as boolean
      changes.push(
        switchChange('key', key.id, enabled, (deps) => setPatDisabled(deps, key.id, !enabled)),
      )
    }
    if (Object.keys(edit).length === 0 && !switched) {
      changes.push({ kind: 'key', id: key.id, action: 'unchanged' })
    }
  }
  return changes
}

/** An edit whose quota is whole: a refill left out was resolved against the stored key. */
type ResolvedEdit = Omit<PatEdit, 'quota'> & { readonly quota?: QuotaSpec | null | undefined }

/**
 * The stated fields that differ from the stored key. A quota stated without a refill keeps
 * the key's refill, as `pat edit --quota N` does.
 */
function differences(edit: PatEdit, record: PatRecord): ResolvedEdit {
  const out: { -readonly [K in keyof ResolvedEdit]: ResolvedEdit[K] } = {}
  if (edit.name !== undefined && edit.name !== record.name) out.name = edit.name
  if (edit.permissions !== undefined && !sameList(edit.permissions, record.permissions)) {
    out.permissions = edit.permissions
  }
  if (edit.rateLimit !== undefined && !sameRate(edit.rateLimit, record.rateLimit ?? null)) {
    out.rateLimit = edit.rateLimit
  }
  const quota = edit.quota == null ? edit.quota : resolveQuotaEdit(edit.quota, record.quota).spec
  if (quota !== undefined && !sameQuota(quota, record.quota ?? null)) out.quota = quota
  if (
    edit.metadata !== undefined &&
    canonicalJson(edit.metadata) !== canonicalJson(record.metadata ?? null)
  ) {
    out.metadata = edit.metadata
  }
  if (edit.externalId !== undefined && edit.externalId !== (record.externalId ?? null)) {
    out.externalId = edit.externalId
  }
  if (
    edit.certificateThumbprint !== undefined &&
    edit.certificateThumbprint !== (record.certificateThumbprint ?? null)
  ) {
    out.certificateThumbprint = edit.certificateThumbprint
  }
  return out
}

function keyEdit(id: string, edit: ResolvedEdit, patPolicy: Config['pat']): ApplyChange {
  const command = ['pat', 'edit', id]
  const notes: string[] = []
  if (edit.name !== undefined) {
    command.push('--name', edit.name)
    notes.push('rename')
  }
  if (edit.permissions !== undefined) {
    if (edit.permissions.length === 0) command.push('--clear-permissions')
    for (const p of edit.permissions) command.push('--permission', p)
    notes.push('permissions')
  }
  rateLimitArgs(edit.rateLimit, command, notes)
  if (edit.quota === null) {
    command.push('--clear-quota')
    notes.push('no quota')
  } else if (edit.quota !== undefined) {
    command.push('--quota', String(edit.quota.limit), '--quota-refill', formatRefill(edit.quota))
    notes.push(`quota ${edit.quota.limit} ${formatRefill(edit.quota)}`)
  }
  if (edit.metadata === null) command.push('--clear-metadata')
  else if (edit.metadata !== undefined) command.push('--metadata', JSON.stringify(edit.metadata))
  if (edit.metadata !== undefined) notes.push('metadata')
  if (edit.externalId === null) command.push('--clear-external-id')
  else if (edit.externalId !== undefined) command.push('--external-id', edit.externalId)
  if (edit.externalId !== undefined) notes.push('external id')
  if (edit.certificateThumbprint === null) command.push('--unbind-cert')
  else if (edit.certificateThumbprint !== undefined) {
    command.push('--cert-thumbprint', edit.certificateThumbprint)
  }
  if (edit.certificateThumbprint !== undefined) notes.push('certificate binding')
  return {
    kind: 'key',
    id,
    action: 'update',
    note: notes.join(', '),
    command,
    run: (deps) => editTenantPat({ ...deps, patPolicy }, id, edit),
  }
}

/** A key as `export` writes it: its own settings, then what describes it. */
export function keyEntryOf(pat: PatRecord): Record<string, unknown> {
  return {
    id: pat.id,
    tenant: pat.tenantId,
    subject: pat.subject,
    name: pat.name,
    permissions: [...pat.permissions],
    enabled: pat.disabledAt == null,
    ...(pat.rateLimit ? { rateLimit: formatRate(pat.rateLimit) } : {}),
    ...(pat.quota ? { quota: { limit: pat.quota.limit, refill: formatRefill(pat.quota) } } : {}),
    ...(pat.metadata ? { metadata: pat.metadata } : {}),
    ...(pat.externalId ? { externalId: pat.externalId } : {}),
    ...(pat.certificateThumbprint ? { certificateThumbprint: pat.certificateThumbprint } : {}),
    last4: pat.last4,
    createdAt: isoTime(pat.createdAt),
    expiresAt: isoTime(pat.expiresAt),
    revokedAt: isoTime(pat.revokedAt),
  }
}

function sameQuota(a: QuotaSpec | null, b: Quota | null): boolean {
  if (a === null || b === null) return a === b
  return (
    a.limit === b.limit && a.refill === b.refill && (a.intervalSec ?? 0) === (b.intervalSec ?? 0)
  )
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && [...a].sort().join('\n') === [...b].sort().join('\n')
}
