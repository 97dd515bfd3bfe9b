import { Buffer } from 'node:buffer'
import { quotaView } from '../../auth/key-fields.ts'
import { OperationRefused } from '../../auth/operations.ts'
import {
  checkRotationGrace,
  editTenantPat,
  findPatByRef,
  issueTenantPat,
  listTenantPats,
  MAX_ROTATION_GRACE_MS,
  type PatLifetime,
  patMetadata,
  patStatus,
  revokeLeakedPats,
  revokeTenantPat,
  rotateTenantPat,
  setPatDisabled,
} from '../../auth/pat-lifecycle.ts'
import { readUsageSeries } from '../../auth/usage.ts'
import { isPatToken, PAT_PATTERN } from '../../core/pat.ts'
import type { PatRecord } from '../../core/ports.ts'
import type { Store } from '../../stores/store.ts'
import {
  flag,
  optionalString,
  type ParsedArgs,
  requiredPositional,
  requiredString,
  stringList,
} from '../args.ts'
import {
  ADMIN_OVERRIDES,
  type CommandContext,
  type CommandDef,
  operate,
  operationDeps,
  type RefusalWording,
  withStore,
} from '../context.ts'
import { DAY_MS, formatDuration, parseDuration } from '../durations.ts'
import { CommandFailure, UsageError } from '../errors.ts'
import {
  CERTIFICATE_OPTIONS,
  CLEAR_OPTIONS,
  certificateOption,
  editedField,
  KEY_OPTIONS,
  metadataOption,
  quotaOption,
  rateLimitOption,
  USAGE_OPTIONS,
  usageRangeOption,
} from '../key-options.ts'
import { formatTime, isoTime, type Output } from '../output.ts'
import { printUsage } from '../usage-output.ts'
import { checkPermissions, checkTenantId, checkText, printable } from '../validate.ts'

const MAX_SUBJECT_LENGTH = 255
const MAX_NAME_LENGTH = 100

const EXPIRES_IN = {
  type: 'string',
  value: 'DURATION',
  description:
    'Lifetime: <n>m, <n>h, <n>d or <n>w (e.g. 90d), or never. Default: config pat.defaultExpiresInDays (90d).',
} as const

/** `pat_…abcd`: how a PAT is shown everywhere but at issue. */
export function patHint(record: PatRecord): string {
  return `pat_…${record.last4}`
}

/**
 * A lifetime the lifecycle refused under `pat.maxExpiresInDays`: for the CLI, a bad value of
 * `--expires-in` (exit 2), worded with the flag.
 */
async function withinLifetimePolicy<T>(args: ParsedArgs, run: () => Promise<T>): Promise<T> {
  try {
    return await run()
  } catch (error) {
    if (!(error instanceof OperationRefused) || error.code !== 'lifetime_exceeded') throw error
    const maxDays = maxDaysOf(error)
    const text = optionalString(args, 'expires-in') ?? 'never'
    throw new UsageError(
      text === 'never'
        ? `--expires-in never is not allowed: the PAT lifetime is limited to ${maxDays}d (config pat.maxExpiresInDays); expected a duration up to ${maxDays}d`
        : `--expires-in ${printable(text)} is longer than the maximum PAT lifetime of ${maxDays}d (config pat.maxExpiresInDays)`,
    )
  }
}

/** The bound a refusal carries (the lifecycle's, from the operator's policy), in days. */
const maxDaysOf = (refused: OperationRefused) => (refused.limit?.maxMs ?? 0) / DAY_MS

/** The lifetime `--expires-in` asks for; the lifecycle applies the operator's policy. */
export function requestedLifetime(args: ParsedArgs): PatLifetime {
  const text = optionalString(args, 'expires-in')
  if (text === undefined) return 'default'
  if (text === 'never') return 'never'
  const ms = parseDuration(text)
  if (ms === undefined) {
    throw new UsageError(
      `--expires-in: '${printable(text)}' is not a duration (expected e.g. 90d, 12h, 30m, or never)`,
    )
  }
  return ms
}

/** How the PAT commands word the application layer's refusals. */
const PAT_WORDING: RefusalWording = {
  tenant_unknown: (r) =>
    `no tenant ${r.subject} (create it with: tokengate tenant create ${r.subject})`,
  tenant_disabled: (r) =>
    `tenant ${r.subject} is disabled (enable it with: tokengate tenant enable ${r.subject})`,
}

function printNewToken(out: Output, token: string, record: PatRecord, heading: string): void {
  out.line(heading)
  out.line(`  tenant:       ${record.tenantId}`)
  out.line(`  subject:      ${record.subject}`)
  if (record.name) out.line(`  name:         ${record.name}`)
  out.line(`  permissions:  ${record.permissions.join(', ') || '(none)'}`)
  out.line(`  expires:      ${record.expiresAt === null ? 'never' : formatTime(record.expiresAt)}`)
  printProductFields(out, record)
  out.line()
  out.line('Token (shown once: it will not be shown again and cannot be recovered; store it now):')
  out.line()
  out.line(`  ${token}`)
  out.line()
}

/** The key's own limits, quota, metadata and external id, when it has them. */
function printProductFields(out: Output, record: PatRecord): void {
  if (record.rateLimit) {
    out.line(
      `  rate limit:   ${record.rateLimit.max} per ${formatWindow(record.rateLimit.windowSec)}`,
    )
  }
  if (record.quota) out.line(`  quota:        ${quotaText(record.quota)}`)
  if (record.metadata) out.line(`  metadata:     ${JSON.stringify(record.metadata)}`)
  if (record.externalId) out.line(`  external id:  ${record.externalId}`)
  if (record.certificateThumbprint) {
    out.line(`  bound to certificate (x5t#S256): ${record.certificateThumbprint}`)
  }
}

function formatWindow(seconds: number): string {
  return seconds === 1 ? 'second' : `${formatDuration(seconds * 1000)}`
}

function quotaText(quota: NonNullable<PatRecord['quota']>): string {
  const every =
    quota.refill === 'interval'
      ? `every ${formatDuration((quota.intervalSec ?? 0) * 1000)}`
      : quota.refill === 'none'
        ? 'in all (no refill)'
        : quota.refill === 'daily'
          ? 'per UTC day'
          : 'per UTC month'
  return `${quota.limit} uses ${every}`
}

const issue: CommandDef = {
  path: ['pat', 'issue'],
  summary: 'Issue a Personal Access Token (printed once)',
  synopsis:
    '--tenant ID --subject SUB [--permission P]... [--name N] [--expires-in DURATION]\n  [--rate-limit N/WINDOW] [--quota N [--quota-refill REFILL]] [--metadata JSON] [--external-id ID]\n  [--bind-cert FILE | --cert-thumbprint S256]',
  description:
    'The tenant must exist and be enabled. Only the SHA-256 of the token is stored: the token\nis printed once and cannot be shown again. A key may carry its own rate limit, a quota of\nuses (refilled daily, monthly or every interval), metadata and an external id (docs/limits.md).',
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
    ...KEY_OPTIONS,
    ...CERTIFICATE_OPTIONS,
  },
  examples: [
    'tokengate pat issue --tenant acme --subject ci-deploy --permission tokens:read --expires-in 30d',
    'tokengate pat issue --tenant acme --subject ci --json | jq -r .token',
    'tokengate pat issue --tenant acme --subject partner --rate-limit 10/1s --quota 10000 --quota-refill monthly --external-id cus_42',
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
    const lifetime = requestedLifetime(ctx.args)
    const product = {
      rateLimit: rateLimitOption(ctx.args),
      quota: quotaOption(ctx.args),
      metadata: metadataOption(ctx.args),
      externalId: optionalString(ctx.args, 'external-id'),
      certificateThumbprint: certificateOption(ctx.args),
    }
    const { token, record } = await withStore(config, (store) =>
      operate(
        () =>
          withinLifetimePolicy(ctx.args, () =>
            issueTenantPat(
              { ...operationDeps(ctx, store), patPolicy: config.pat },
              { tenantId, subject, name, permissions, lifetime, ...product },
            ),
          ),
        PAT_WORDING,
      ),
    )
    if (ctx.json) ctx.out.json({ token, ...patMetadata(record, now) })
    else printNewToken(ctx.out, token, record, `Issued PAT ${record.id}.`)
    return 0
  },
}

const list: CommandDef = {
  path: ['pat', 'list'],
  summary: "List a tenant's PATs (metadata only), or every key with an external id",
  synopsis: '--tenant ID [--expiring-within DURATION] [--external-id ID] | --external-id ID',
  options: {
    tenant: { type: 'string', value: 'ID', description: 'Tenant whose tokens to list.' },
    'external-id': {
      type: 'string',
      value: 'ID',
      description: 'Only keys with exactly this external id (in every tenant without --tenant).',
    },
    'expiring-within': {
      type: 'string',
      value: 'DURATION',
      description: 'Only unrevoked tokens expiring within this time from now, e.g. 7d.',
    },
  },
  examples: [
    'tokengate pat list --tenant acme',
    'tokengate pat list --tenant acme --expiring-within 7d',
    'tokengate pat list --external-id cus_42',
  ],
  async run(ctx) {
    const externalId = optionalString(ctx.args, 'external-id')
    if (externalId !== undefined) return listByExternalId(ctx, externalId)
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
    const records = await withStore(config, (store) =>
      operate(
        () =>
          listTenantPats(
            operationDeps(ctx, store),
            tenantId,
            { expiringBefore: withinMs === undefined ? undefined : now + withinMs },
            config.pagination.maxLimit,
          ),
        { tenant_unknown: () => `no tenant ${tenantId}` },
      ),
    )
    if (ctx.json) {
      ctx.out.json({ tenantId, tokens: records.map((r) => patMetadata(r, now)) })
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

/** `pat list --external-id`: keys with that external id, in one tenant or all (newest first). */
async function listByExternalId(ctx: CommandContext, externalId: string): Promise<number> {
  const tenant = optionalString(ctx.args, 'tenant')
  const tenantId = tenant === undefined ? undefined : checkTenantId(tenant, '--tenant')
  if (optionalString(ctx.args, 'expiring-within') !== undefined) {
    throw new UsageError('--expiring-within cannot be combined with --external-id')
  }
  const config = ctx.config(ADMIN_OVERRIDES)
  const now = ctx.now()
  const records = await withStore(config, async (store) => {
    const found: PatRecord[] = []
    let cursor: string | undefined
    do {
      const page = await store.admin.searchPats(
        { externalId, tenantId },
        { limit: config.pagination.maxLimit, cursor },
      )
      found.push(...page.items)
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined && found.length < MAX_LISTED)
    return found
  })
  if (ctx.json) {
    ctx.out.json({ externalId, tokens: records.map((r) => patMetadata(r, now)) })
    return 0
  }
  ctx.out.table(
    ['ID', 'TOKEN', 'TENANT', 'NAME', 'SUBJECT', 'STATUS', 'EXPIRES'],
    records.map((r) => [
      r.id,
      patHint(r),
      r.tenantId,
      r.name || '-',
      r.subject,
      patStatus(r, now),
      r.expiresAt === null ? 'never' : formatTime(r.expiresAt),
    ]),
  )
  return 0
}

const MAX_LISTED = 10_000

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
    const { record, changed } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(
        async () => revokeTenantPat(operationDeps(ctx, store), (await findPatByRef(store, ref)).id),
        {
          token_unknown: () =>
            isPatToken(ref)
              ? 'no such token (the given pat_ token is not known)'
              : `no token ${printable(ref)} (see: tokengate pat list --tenant ID)`,
        },
      ),
    )
    if (ctx.json) ctx.out.json({ ...patMetadata(record, now), changed })
    else if (changed)
      ctx.out.line(`Revoked ${record.id} (${patHint(record)}, tenant ${record.tenantId}).`)
    else ctx.out.line(`${record.id} was already revoked at ${formatTime(record.revokedAt)}.`)
    return 0
  },
}

/** `--grace`: 0 (the default: the old token is refused at once) up to the lifecycle's maximum. */
function resolveGrace(args: ParsedArgs): number {
  const text = optionalString(args, 'grace')
  if (text === undefined || text === '0' || text === '0s') return 0
  const ms = parseDuration(text)
  if (ms === undefined) {
    throw new UsageError(
      `--grace: '${printable(text)}' is not a duration (expected e.g. 0, 30m, 1h, 7d)`,
    )
  }
  try {
    return checkRotationGrace(ms)
  } catch (error) {
    if (!(error instanceof OperationRefused && error.limit)) throw error
    throw new UsageError(
      `--grace ${text} is longer than the maximum of ${formatDuration(error.limit.maxMs)}`,
    )
  }
}

const rotate: CommandDef = {
  path: ['pat', 'rotate'],
  summary: 'Replace a PAT with a new one; the old one stops working after a grace period',
  synopsis: 'TOKEN_ID [--grace DURATION] [--expires-in DURATION]',
  description:
    'Issues a new token with the same tenant, subject, name and permissions and a fresh expiry.\nThe old token keeps working for --grace (default 0: refused at once), then is refused.\nUsing the old token after its grace is treated as a leak (reuse detection): the server\nrevokes every token of the rotation family, the new one included, and audits\npat.reuse_detected. The new token is printed once.',
  options: {
    grace: {
      type: 'string',
      value: 'DURATION',
      description: `How long the old token keeps working: 0 (default) up to ${formatDuration(MAX_ROTATION_GRACE_MS)}, e.g. 1h.`,
    },
    'expires-in': EXPIRES_IN,
  },
  positionals: 1,
  examples: [
    'tokengate pat rotate tok_5Hq2x9... --expires-in 30d',
    'tokengate pat rotate tok_5Hq2x9... --grace 1h',
  ],
  async run(ctx) {
    const id = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const graceMs = resolveGrace(ctx.args)
    const config = ctx.config(ADMIN_OVERRIDES)
    const now = ctx.now()
    const lifetime = requestedLifetime(ctx.args)
    const deps = (store: Store) => ({ ...operationDeps(ctx, store), patPolicy: config.pat })
    const { token, record, graceUntil } = await withStore(config, (store) =>
      operate(
        () =>
          withinLifetimePolicy(ctx.args, () =>
            rotateTenantPat(deps(store), { id, lifetime, graceMs }),
          ),
        {
          ...PAT_WORDING,
          token_unknown: () => `no token ${printable(id)}`,
          token_revoked: (r) =>
            `${id} is revoked (at ${formatTime(r.at)}); issue a new token with: tokengate pat issue`,
          token_rotated: (r) =>
            `${id} was already rotated (at ${formatTime(r.at)}); rotate its replacement instead (see: tokengate pat list --tenant ${r.tenantId})`,
          token_changed: () => `${id} was revoked or rotated meanwhile; nothing changed`,
        },
      ),
    )
    if (ctx.json) {
      ctx.out.json({ token, ...patMetadata(record, now), oldTokenGraceUntil: isoTime(graceUntil) })
    } else {
      const oldState =
        graceMs === 0
          ? `${id} is refused from now on`
          : `${id} keeps working until ${formatTime(graceUntil)}`
      printNewToken(ctx.out, token, record, `Rotated ${id} -> ${record.id}; ${oldState}.`)
    }
    return 0
  },
}

/**
 * Tokens from the arguments, or from stdin for `-`: every PAT-shaped string in the input
 * (so a secret-scanning alert can be piped in as it is).
 */
async function leakedTokens(ctx: CommandContext): Promise<string[]> {
  const tokens: string[] = []
  for (const arg of ctx.args.positionals) {
    if (arg !== '-') {
      tokens.push(arg)
      continue
    }
    if (!ctx.io.stdin) throw new UsageError('- (read tokens from stdin): no stdin available')
    let text = ''
    for await (const chunk of ctx.io.stdin) {
      text += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8')
      if (text.length > MAX_STDIN_CHARS) throw new UsageError('stdin: more than 10 MB of input')
    }
    const found = [...text.matchAll(new RegExp(PAT_PATTERN.source, 'g'))].map((m) => m[0])
    if (found.length === 0) throw new CommandFailure('stdin: no pat_ token found in the input')
    tokens.push(...found)
  }
  if (tokens.length === 0) throw new UsageError('missing argument TOKEN (or - to read stdin)')
  return [...new Set(tokens)]
}

const MAX_STDIN_CHARS = 10 * 1024 * 1024

const revokeLeaked: CommandDef = {
  path: ['pat', 'revoke-leaked'],
  summary: 'Revoke tokens found in plaintext (secret-scanning alerts), audited',
  synopsis: 'TOKEN... | -',
  description:
    'Each TOKEN is a plaintext PAT (pat_...), looked up by its SHA-256 and revoked at once.\nWith -, every PAT-shaped string on stdin is taken (pipe a scanner alert in as it is).\nEach revocation is audited as pat.leak_revoked with the token fingerprint (pat_…last4),\nnever the token. Tokens are reported as revoked, already revoked, unknown, or not a\ntokengate PAT (bad format or checksum). Exit 0 when every token given is now revoked\n(or was already), 1 when any was unknown or not a PAT.',
  options: {},
  positionals: 10_000,
  examples: [
    'tokengate pat revoke-leaked pat_3kq9...',
    'gh api /repos/o/r/secret-scanning/alerts --jq ".[].secret" | tokengate pat revoke-leaked -',
  ],
  async run(ctx) {
    const tokens = await leakedTokens(ctx)
    const results = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      revokeLeakedPats(operationDeps(ctx, store), tokens),
    )
    const failed = results.some((r) => r.outcome === 'unknown' || r.outcome === 'not_a_pat')
    if (ctx.json) {
      ctx.out.json({
        results: results.map((r) => ({
          fingerprint: r.fingerprint,
          outcome: r.outcome,
          tokenId: r.record?.id ?? null,
          tenantId: r.record?.tenantId ?? null,
        })),
      })
      return failed ? 1 : 0
    }
    for (const r of results) {
      const where = r.record ? ` ${r.record.id} (tenant ${r.record.tenantId})` : ''
      const what = {
        revoked: 'revoked',
        already_revoked: `already revoked at ${formatTime(r.record?.revokedAt ?? null)}`,
        unknown: 'unknown: no such token in this store',
        not_a_pat: 'not a tokengate PAT (wrong format or checksum)',
      }[r.outcome]
      ctx.out.line(`${r.fingerprint}${where}: ${what}`)
    }
    return failed ? 1 : 0
  },
}

/** How the key commands word a refusal of a token they name. */
function keyWording(id: string) {
  return {
    token_unknown: () => `no token ${printable(id)} (see: tokengate pat list --tenant ID)`,
    token_revoked: (r: OperationRefused) =>
      `${printable(id)} is revoked (at ${formatTime(r.at)}); a revoked key cannot be changed`,
    token_changed: () => `${printable(id)} was revoked meanwhile; nothing changed`,
  }
}

const edit: CommandDef = {
  path: ['pat', 'edit'],
  summary: "Change a key's name, permissions, expiry, rate limit, quota, metadata or external id",
  synopsis:
    'TOKEN_ID [--name N] [--permission P]... [--clear-permissions] [--expires-in DURATION|never]\n  [--expires-at TIME] [--rate-limit N/WINDOW] [--quota N [--quota-refill REFILL]]\n  [--reset-quota] [--metadata JSON] [--external-id ID] [--clear-rate-limit] [--clear-quota]\n  [--clear-metadata] [--clear-external-id] [--bind-cert FILE | --cert-thumbprint S256]\n  [--unbind-cert]',
  description:
    "Only the fields given change. --permission replaces the whole list (repeat it for several).\nThe expiry stays within pat.maxExpiresInDays counted from the key's creation (rotate a key\nto go beyond). --reset-quota forgets the uses counted so far. Every running instance applies\nthe change within a second; it is audited as pat.updated with the fields before and after.",
  options: {
    name: { type: 'string', value: 'N', description: 'New label.' },
    permission: {
      type: 'string',
      multiple: true,
      value: 'P',
      description: 'The new permission list (repeatable; replaces the old list).',
    },
    'clear-permissions': { type: 'boolean', description: 'Remove every permission.' },
    'expires-in': {
      type: 'string',
      value: 'DURATION',
      description: 'New expiry, this long from now (e.g. 30d), or never.',
    },
    'expires-at': { type: 'string', value: 'TIME', description: 'New expiry (ISO 8601).' },
    ...KEY_OPTIONS,
    'reset-quota': { type: 'boolean', description: 'Start the quota count again from zero.' },
    ...CLEAR_OPTIONS,
    ...CERTIFICATE_OPTIONS,
    'unbind-cert': {
      type: 'boolean',
      description: 'Remove the certificate binding: the key works without a certificate again.',
    },
  },
  positionals: 1,
  examples: [
    'tokengate pat edit tok_5Hq2x9... --rate-limit 50/1s --quota 100000 --quota-refill monthly',
    'tokengate pat edit tok_5Hq2x9... --permission tokens:read --permission audit:read',
    'tokengate pat edit tok_5Hq2x9... --reset-quota',
  ],
  async run(ctx) {
    const id = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const args = ctx.args
    const name = optionalString(args, 'name')
    const permissions = stringList(args, 'permission')
    if (permissions.length > 0 && flag(args, 'clear-permissions')) {
      throw new UsageError('--permission and --clear-permissions contradict each other; give one')
    }
    const now = ctx.now()
    const edit = {
      name: name === undefined ? undefined : checkText(name, 'name', MAX_NAME_LENGTH),
      permissions:
        permissions.length > 0
          ? checkPermissions(permissions)
          : flag(args, 'clear-permissions')
            ? []
            : undefined,
      expiresAt: editedExpiry(args, now),
      rateLimit: editedField(args, 'rate-limit', rateLimitOption(args)),
      quota: editedField(args, 'quota', quotaOption(args)),
      resetQuotaUsage: flag(args, 'reset-quota'),
      metadata: editedField(args, 'metadata', metadataOption(args)),
      externalId: editedField(args, 'external-id', optionalString(args, 'external-id')),
      certificateThumbprint: editedCertificate(args),
    }
    const config = ctx.config(ADMIN_OVERRIDES)
    const { record, changed, notes, keptRefill } = await withStore(config, (store) =>
      operate(
        () =>
          editTenantPat({ ...operationDeps(ctx, store), store, patPolicy: config.pat }, id, edit),
        {
          ...keyWording(id),
          lifetime_exceeded: (refused) =>
            `the new expiry would make ${printable(id)} live longer than ${maxDaysOf(refused)}d from its creation (config pat.maxExpiresInDays); rotate it instead`,
        },
      ),
    )
    if (ctx.json) ctx.out.json({ ...patMetadata(record, now), changed, notes })
    else {
      ctx.out.line(changed ? `Updated ${record.id}.` : `${record.id}: nothing to change.`)
      if (keptRefill !== undefined && record.quota) {
        ctx.out.line(
          `  quota: ${quotaText(record.quota)} (refill ${keptRefill} kept; --quota-refill none makes it a lifetime quota)`,
        )
      }
      for (const note of notes.filter((n) => !n.startsWith('quota:'))) ctx.out.line(`  ${note}`)
    }
    return 0
  },
}

/** `--bind-cert` / `--cert-thumbprint`, null for `--unbind-cert`, for `pat edit`. */
function editedCertificate(args: ParsedArgs): string | null | undefined {
  const bound = certificateOption(args)
  if (!flag(args, 'unbind-cert')) return bound
  if (bound !== undefined) {
    throw new UsageError('--unbind-cert contradicts --bind-cert / --cert-thumbprint; give one')
  }
  return null
}

/** `--expires-in` (from now, or never) or `--expires-at` (ISO 8601), for `pat edit`. */
function editedExpiry(args: ParsedArgs, now: number): number | 'never' | undefined {
  const at = optionalString(args, 'expires-at')
  const lifetime =
    optionalString(args, 'expires-in') === undefined ? undefined : requestedLifetime(args)
  if (at !== undefined && lifetime !== undefined) {
    throw new UsageError('--expires-in and --expires-at contradict each other; give one')
  }
  if (at !== undefined) {
    const ms = Date.parse(at)
    if (Number.isNaN(ms)) {
      throw new UsageError(`--expires-at: '${printable(at)}' is not a time (expected ISO 8601)`)
    }
    return ms
  }
  if (lifetime === undefined || lifetime === 'default') return undefined
  return lifetime === 'never' ? 'never' : now + lifetime
}

function setDisabled(disabled: boolean): CommandDef {
  const verb = disabled ? 'disable' : 'enable'
  return {
    path: ['pat', verb],
    summary: disabled
      ? 'Disable a key without revoking it: refused (401) until enabled again'
      : 'Enable a disabled key again',
    synopsis: 'TOKEN_ID',
    description: disabled
      ? 'A disabled key is refused with 401 invalid_token on every instance within a second,\nlike an invalid token; unlike a revoked one it can be enabled again (pat enable).'
      : undefined,
    options: {},
    positionals: 1,
    examples: [`tokengate pat ${verb} tok_5Hq2x9...`],
    async run(ctx) {
      const id = requiredPositional(ctx.args, 0, 'TOKEN_ID')
      const now = ctx.now()
      const { record, changed, notes } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
        operate(() => setPatDisabled(operationDeps(ctx, store), id, disabled), keyWording(id)),
      )
      if (ctx.json) ctx.out.json({ ...patMetadata(record, now), changed, notes })
      else {
        ctx.out.line(
          changed ? `${record.id} is now ${verb}d.` : `${record.id} was already ${verb}d.`,
        )
        for (const note of notes) ctx.out.line(`  ${note}`)
      }
      return 0
    },
  }
}

const show: CommandDef = {
  path: ['pat', 'show'],
  summary: 'Show one key: its fields, status and what is left of its quota',
  synopsis: 'TOKEN_ID',
  options: {},
  positionals: 1,
  examples: ['tokengate pat show tok_5Hq2x9...'],
  async run(ctx) {
    const ref = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const now = ctx.now()
    const { record, quota } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(
        async () => {
          const record = await findPatByRef(store, ref)
          return { record, quota: record.quota ? await quotaView(store, record.quota, now) : null }
        },
        { token_unknown: () => `no token ${printable(ref)}` },
      ),
    )
    if (ctx.json) {
      ctx.out.json({ ...patMetadata(record, now), quotaUsage: quota })
      return 0
    }
    ctx.out.line(`${record.id} (${patHint(record)})`)
    ctx.out.line(`  tenant:       ${record.tenantId}`)
    ctx.out.line(`  subject:      ${record.subject}`)
    ctx.out.line(`  name:         ${record.name || '-'}`)
    ctx.out.line(`  permissions:  ${record.permissions.join(', ') || '(none)'}`)
    ctx.out.line(`  status:       ${patStatus(record, now)}`)
    ctx.out.line(`  created:      ${formatTime(record.createdAt)}`)
    ctx.out.line(
      `  expires:      ${record.expiresAt === null ? 'never' : formatTime(record.expiresAt)}`,
    )
    ctx.out.line(`  last used:    ${formatTime(record.lastUsedAt)}`)
    printProductFields(ctx.out, record)
    if (quota) {
      const resets = quota.resetsAt === null ? 'no refill' : `refills ${quota.resetsAt}`
      ctx.out.line(`  quota left:   ${quota.remaining} of ${quota.limit} (${resets})`)
    }
    return 0
  },
}

const usage: CommandDef = {
  path: ['pat', 'usage'],
  summary: "A key's requests by outcome (allowed, 401, 403, 429) per minute, hour or day",
  synopsis: 'TOKEN_ID [--resolution minute|hour|day] [--since TIME] [--until TIME] [--csv]',
  description:
    'Counted by every instance and added to the store every few seconds (usage.flushIntervalMs).\nBuckets without requests are left out of the table (not out of --csv or --json).',
  options: USAGE_OPTIONS,
  positionals: 1,
  examples: [
    'tokengate pat usage tok_5Hq2x9... --resolution hour --since 24h',
    'tokengate pat usage tok_5Hq2x9... --resolution day --csv > usage.csv',
  ],
  async run(ctx) {
    const ref = requiredPositional(ctx.args, 0, 'TOKEN_ID')
    const now = ctx.now()
    const range = usageRangeOption(ctx.args, now)
    const series = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(
        async () => readUsageSeries(store, 'key', (await findPatByRef(store, ref)).id, range, now),
        { token_unknown: () => `no token ${printable(ref)}` },
      ),
    )
    printUsage(ctx, series)
    return 0
  },
}

/** `pat issue|list|show|edit|disable|enable|usage|revoke|rotate|revoke-leaked`. */
export const patCommands: readonly CommandDef[] = [
  issue,
  list,
  show,
  edit,
  setDisabled(true),
  setDisabled(false),
  usage,
  revoke,
  rotate,
  revokeLeaked,
]
