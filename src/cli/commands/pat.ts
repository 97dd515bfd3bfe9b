import type { Config } from '../../config/schema.ts'
import { checkPatFormat, hashPat, issuePat } from '../../core/pat.ts'
import type { PatRecord } from '../../core/ports.ts'
import type { Store } from '../../stores/store.ts'
import {
  optionalString,
  type ParsedArgs,
  requiredPositional,
  requiredString,
  stringList,
} from '../args.ts'
import { ADMIN_OVERRIDES, auditCli, type CommandDef, withStore } from '../context.ts'
import { DAY_MS, parseDuration } from '../durations.ts'
import { CommandFailure, UsageError } from '../errors.ts'
import { formatTime, isoTime, type Output } from '../output.ts'
import { checkPermissions, checkTenantId, checkText, printable } from '../validate.ts'

const MAX_SUBJECT_LENGTH = 255
const MAX_NAME_LENGTH = 100

const EXPIRES_IN = {
  type: 'string',
  value: 'DURATION',
  description:
    'Lifetime: <n>m, <n>h, <n>d or <n>w (e.g. 90d), or never. Default: config pat.defaultExpiresInDays (90d).',
} as const

/** A PAT's metadata as JSON output shows it: never the token, never its hash. */
export function patJson(record: PatRecord, now: number) {
  return {
    id: record.id,
    tenantId: record.tenantId,
    subject: record.subject,
    name: record.name,
    permissions: record.permissions,
    last4: record.last4,
    status: patStatus(record, now),
    createdAt: isoTime(record.createdAt),
    expiresAt: isoTime(record.expiresAt),
    lastUsedAt: isoTime(record.lastUsedAt),
    revokedAt: isoTime(record.revokedAt),
    rotatedFrom: record.rotatedFrom,
  }
}

function patStatus(record: PatRecord, now: number): 'active' | 'revoked' | 'expired' {
  if (record.revokedAt !== null) return 'revoked'
  if (record.expiresAt !== null && record.expiresAt <= now) return 'expired'
  return 'active'
}

/** `pat_…abcd`: how a PAT is shown everywhere but at issue. */
export function patHint(record: PatRecord): string {
  return `pat_…${record.last4}`
}

/**
 * The expiry for a new token from `--expires-in`, under the operator's policy: with
 * `pat.maxExpiresInDays` > 0, `never` and anything longer are refused.
 */
export function resolveExpiry(args: ParsedArgs, config: Readonly<Config>, now: number) {
  const text = optionalString(args, 'expires-in')
  const maxDays = config.pat.maxExpiresInDays
  if (text === undefined) return now + config.pat.defaultExpiresInDays * DAY_MS
  if (text === 'never') {
    if (maxDays > 0) {
      throw new UsageError(
        `--expires-in never is not allowed: the PAT lifetime is limited to ${maxDays}d (config pat.maxExpiresInDays); expected a duration up to ${maxDays}d`,
      )
    }
    return null
  }
  const ms = parseDuration(text)
  if (ms === undefined) {
    throw new UsageError(
      `--expires-in: '${printable(text)}' is not a duration (expected e.g. 90d, 12h, 30m, or never)`,
    )
  }
  if (maxDays > 0 && ms > maxDays * DAY_MS) {
    throw new UsageError(
      `--expires-in ${text} is longer than the maximum PAT lifetime of ${maxDays}d (config pat.maxExpiresInDays)`,
    )
  }
  return now + ms
}

async function requireEnabledTenant(store: Store, tenantId: string): Promise<void> {
  const tenant = await store.findTenant(tenantId)
  if (!tenant) {
    throw new CommandFailure(
      `no tenant ${tenantId} (create it with: tokengate tenant create ${tenantId})`,
    )
  }
  if (!tenant.enabled) {
    throw new CommandFailure(
      `tenant ${tenantId} is disabled (enable it with: tokengate tenant enable ${tenantId})`,
    )
  }
}

function printNewToken(out: Output, token: string, record: PatRecord, heading: string): void {
  out.line(heading)
  out.line(`  tenant:       ${record.tenantId}`)
  out.line(`  subject:      ${record.subject}`)
  if (record.name) out.line(`  name:         ${record.name}`)
  out.line(`  permissions:  ${record.permissions.join(', ') || '(none)'}`)
  out.line(`  expires:      ${record.expiresAt === null ? 'never' : formatTime(record.expiresAt)}`)
  out.line()
  out.line('Token (shown once: it will not be shown again and cannot be recovered; store it now):')
  out.line()
  out.line(`  ${token}`)
  out.line()
}

const issue: CommandDef = {
  path: ['pat', 'issue'],
  summary: 'Issue a Personal Access Token (printed once)',
  synopsis: '--tenant ID --subject SUB [--permission P]... [--name N] [--expires-in DURATION]',
  description:
    'The tenant must exist and be enabled. Only the SHA-256 of the token is stored: the token\nis printed once and cannot be shown again.',
  options: {
    tenant: { type: 'string', value: 'ID', description: 'Tenant the token belongs to.' },
    subject: { type: 'string', value: 'SUB', description: 'Who or what acts with the token.' },
    permission: {
      type: 'string',
      multiple: true,
      value: 'P',
      description: 'Permission granted, e.g. tokens:read (repeatable).',
    },
    name: { type: 'string', value: 'N', description: 'Label shown in listings.' },
    'expires-in': EXPIRES_IN,
  },
  examples: [
    'tokengate pat issue --tenant acme --subject ci-deploy --permission tokens:read --expires-in 30d',
    'tokengate pat issue --tenant acme --subject ci --json | jq -r .token',
  ],
  async run(ctx) {
    const tenantId = checkTenantId(requiredString(ctx.args, 'tenant', 'a tenant id'), '--tenant')
    const subject = checkText(
      requiredString(ctx.args, 'subject', 'the subject the token acts as (a user or service)'),
      'subject',
      MAX_SUBJECT_LENGTH,
    )
    const permissions = checkPermissions(stringList(ctx.args, 'permission'))
    const name = checkText(optionalString(ctx.args, 'name') ?? '', 'name', MAX_NAME_LENGTH)
    const config = ctx.config(ADMIN_OVERRIDES)
    const now = ctx.now()
    const expiresAt = resolveExpiry(ctx.args, config, now)
    const { token, record } = await withStore(config, async (store) => {
      await requireEnabledTenant(store, tenantId)
      const issued = issuePat({ tenantId, subject, name, permissions, expiresAt, now })
      await store.insertPat(issued.record)
      await auditCli(ctx, store, {
        type: 'pat.issued',
        tenantId,
        details: {
          tokenId: issued.record.id,
          subject,
          name,
          permissions,
          expiresAt: isoTime(expiresAt),
        },
      })
      return issued
    })
    if (ctx.json) ctx.out.json({ token, ...patJson(record, now) })
    else printNewToken(ctx.out, token, record, `Issued PAT ${record.id}.`)
    return 0
  },
}

const list: CommandDef = {
  path: ['pat', 'list'],
  summary: "List a tenant's PATs (metadata only)",
  synopsis: '--tenant ID [--expiring-within DURATION]',
  options: {
    tenant: { type: 'string', value: 'ID', description: 'Tenant whose tokens to list.' },
    'expiring-within': {
      type: 'string',
      value: 'DURATION',
      description: 'Only unrevoked tokens expiring within this time from now, e.g. 7d.',
    },
  },
  examples: [
    'tokengate pat list --tenant acme',
    'tokengate pat list --tenant acme --expiring-within 7d',
  ],
  async run(ctx) {
    const tenantId = checkTenantId(requiredString(ctx.args, 'tenant', 'a tenant id'), '--tenant')
    const within = optionalString(ctx.args, 'expiring-within')
    const withinMs = within === undefined ? undefined : parseDuration(within)
    if (within !== undefined && withinMs === undefined) {
      throw new UsageError(
        `--expiring-within: '${printable(within)}' is not a duration (expected e.g. 7d, 12h, 30m)`,
      )
    }
    const config = ctx.config(ADMIN_OVERRIDES)
    const now = ctx.now()
    const filter = withinMs === undefined ? undefined : { expiringBefore: now + withinMs }
    const records = await withStore(config, async (store) => {
      if (!(await store.findTenant(tenantId))) throw new CommandFailure(`no tenant ${tenantId}`)
      const all: PatRecord[] = []
      let cursor: string | undefined
      do {
        const page = await store.listPats(
          tenantId,
          { limit: config.pagination.maxLimit, cursor },
          filter,
        )
        all.push(...page.items)
        cursor = page.nextCursor ?? undefined
      } while (cursor !== undefined)
      return all
    })
    if (ctx.json) {
      ctx.out.json({ tenantId, tokens: records.map((r) => patJson(r, now)) })
      return 0
    }
    ctx.out.table(
      ['ID', 'TOKEN', 'NAME', 'SUBJECT', 'PERMISSIONS', 'STATUS', 'EXPIRES', 'LAST USED'],
      records.map((r) => [
        r.id,
        patHint(r),
        r.name || '-',
        r.subject,
        r.permissions.join(',') || '-',
        patStatus(r, now),
        r.expiresAt === null ? 'never' : formatTime(r.expiresAt),
        formatTime(r.lastUsedAt),
      ]),
    )
    return 0
  },
}

const revoke: CommandDef = {
  path: ['pat', 'revoke'],
  summary: 'Revoke a PAT now',
  synopsis: 'TOKEN_ID',
  description:
    'TOKEN_ID is the id shown by `pat list` (tok_...). The token itself (pat_..., e.g. a leaked\ntoken found in a log) is accepted too and looked up by its hash. Revoking twice is harmless.\nA running server rejects the token within its cache TTL (auth.lookupCacheTtlMs).',
  options: {},
  positionals: 1,
  examples: ['tokengate pat revoke tok_5Hq2x9...'],
  async run(ctx) {
    const ref = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const now = ctx.now()
    const { record, changed } = await withStore(ctx.config(ADMIN_OVERRIDES), async (store) => {
      const found = await findByRef(store, ref)
      if (found.revokedAt !== null) return { record: found, changed: false }
      const revoked = await store.revokePat(found.id, now)
      if (!revoked) throw new CommandFailure(`no token ${found.id}`)
      await auditCli(ctx, store, {
        type: 'pat.revoked',
        tenantId: found.tenantId,
        details: { tokenId: found.id, subject: found.subject },
      })
      return { record: revoked, changed: true }
    })
    if (ctx.json) ctx.out.json({ ...patJson(record, now), changed })
    else if (changed)
      ctx.out.line(`Revoked ${record.id} (${patHint(record)}, tenant ${record.tenantId}).`)
    else ctx.out.line(`${record.id} was already revoked at ${formatTime(record.revokedAt)}.`)
    return 0
  },
}

async function findByRef(store: Store, ref: string): Promise<PatRecord> {
  if (ref.startsWith('pat_')) {
    // Looked up by hash, exactly as the server does; the plaintext is never echoed.
    const found = checkPatFormat(ref).ok ? await store.findPatByHash(hashPat(ref)) : undefined
    if (!found) throw new CommandFailure('no such token (the given pat_ token is not known)')
    return found
  }
  const found = await store.getPat(ref)
  if (!found)
    throw new CommandFailure(`no token ${printable(ref)} (see: tokengate pat list --tenant ID)`)
  return found
}

const rotate: CommandDef = {
  path: ['pat', 'rotate'],
  summary: 'Replace a PAT with a new one and revoke the old one',
  synopsis: 'TOKEN_ID [--expires-in DURATION]',
  description:
    'Issues a new token with the same tenant, subject, name and permissions and a fresh expiry,\nthen revokes the old one immediately. The new token is printed once.',
  options: { 'expires-in': EXPIRES_IN },
  positionals: 1,
  examples: ['tokengate pat rotate tok_5Hq2x9... --expires-in 30d'],
  async run(ctx) {
    const id = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const config = ctx.config(ADMIN_OVERRIDES)
    const now = ctx.now()
    const expiresAt = resolveExpiry(ctx.args, config, now)
    const { token, record } = await withStore(config, async (store) => {
      const old = await store.getPat(id)
      if (!old) throw new CommandFailure(`no token ${printable(id)}`)
      if (old.revokedAt !== null) {
        throw new CommandFailure(
          `${id} is revoked (at ${formatTime(old.revokedAt)}); issue a new token with: tokengate pat issue`,
        )
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
      // New first, then revoke: a failure in between leaves the old token working, never none.
      await store.insertPat(issued.record)
      await store.revokePat(old.id, now)
      await auditCli(ctx, store, {
        type: 'pat.rotated',
        tenantId: old.tenantId,
        details: { tokenId: issued.record.id, rotatedFrom: old.id, expiresAt: isoTime(expiresAt) },
      })
      return issued
    })
    if (ctx.json) ctx.out.json({ token, ...patJson(record, now) })
    else printNewToken(ctx.out, token, record, `Rotated ${id} -> ${record.id}; ${id} is revoked.`)
    return 0
  },
}

/** `pat issue|list|revoke|rotate`. */
export const patCommands: readonly CommandDef[] = [issue, list, revoke, rotate]
