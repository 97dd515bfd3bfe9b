import {
  jwtRevocationJson,
  listJwtRevocations,
  removeJwtRevocation,
  revokeJwts,
} from '../../auth/jwt-revocation-operations.ts'
import { flag, optionalString, requiredPositional, requiredString, stringList } from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, operate, operationDeps, withStore } from '../context.ts'
import { formatDuration, parseDuration } from '../durations.ts'
import { CommandFailure, UsageError } from '../errors.ts'
import { timeOption } from '../key-options.ts'
import { formatTime, isoTime } from '../output.ts'
import { checkPermissions, checkTenantId, checkText, printable } from '../validate.ts'

const DEFAULT_TTL_MS = 15 * 60_000

const mint: CommandDef = {
  path: ['jwt', 'mint'],
  summary: 'Mint a JWT access token with the local dev issuer (dev mode only)',
  synopsis: '--tenant ID --subject SUB [--permission P]... [--ttl 15m] --dev',
  description:
    "Signs with the data directory's dev issuer key (created on first use), which only a server\nin dev mode trusts. Refused unless --dev is given or the config sets dev: true.\nThe token alone goes to stdout, so TOKEN=$(tokengate jwt mint ...) works.",
  options: {
    tenant: { type: 'string', value: 'ID', description: 'Value of the tenant_id claim.' },
    subject: { type: 'string', value: 'SUB', description: "Value of 'sub'." },
    permission: {
      type: 'string',
      multiple: true,
      value: 'P',
      description: 'Permission in the permissions claim (repeatable).',
    },
    ttl: {
      type: 'string',
      value: 'DURATION',
      description: 'Lifetime (default 15m; at most auth.maxJwtLifetimeSec).',
    },
    dev: { type: 'boolean', description: 'Dev mode (same as TOKENGATE_DEV=true).' },
  },
  examples: [
    'TOKEN=$(tokengate jwt mint --dev --tenant demo --subject alice --permission tokens:read)',
    'curl -k -H "Authorization: Bearer $TOKEN" -H "X-Tenant-Id: demo" https://127.0.0.1:8443/api/v1/me',
  ],
  async run(ctx) {
    const tenantId = checkTenantId(requiredString(ctx.args, 'tenant', 'a tenant id'), '--tenant')
    const subject = checkText(
      requiredString(ctx.args, 'subject', "the token's subject"),
      'subject',
      255,
    )
    const permissions = checkPermissions(stringList(ctx.args, 'permission'))
    const ttlText = optionalString(ctx.args, 'ttl')
    const ttlMs = ttlText === undefined ? DEFAULT_TTL_MS : parseDuration(ttlText)
    if (ttlMs === undefined) {
      throw new UsageError(
        `--ttl: '${printable(ttlText ?? '')}' is not a duration (expected e.g. 15m, 1h)`,
      )
    }
    const config = ctx.config({
      ...ADMIN_OVERRIDES,
      ...(flag(ctx.args, 'dev') ? { dev: true } : {}),
    })
    // Why refused outside dev: the key sits unencrypted in the data directory and the dev
    // issuer is only trusted by dev servers; minting must not become a production habit.
    if (!config.dev) {
      throw new CommandFailure(
        'jwt mint works in dev mode only (it signs with the local dev issuer key); add --dev, or set dev: true in the config or TOKENGATE_DEV=true',
      )
    }
    if (ttlMs > config.auth.maxJwtLifetimeSec * 1000) {
      throw new UsageError(
        `--ttl ${ttlText} is longer than the maximum JWT lifetime the server accepts (${formatDuration(config.auth.maxJwtLifetimeSec * 1000)}, auth.maxJwtLifetimeSec)`,
      )
    }
    const now = ctx.now()
    // Loaded here, not at the top: the dev issuer brings jose (~50 modules), which every
    // other command, `serve` included, would otherwise load at start-up.
    const { DEV_AUDIENCE, DEV_ISSUER, mintDevJwt } = await import('../../dev/issuer.ts')
    await withStore(config, async (store) => {
      const tenant = await store.findTenant(tenantId)
      if (!tenant) ctx.out.note(`warning: no tenant ${tenantId}; the server will reject this token`)
      else if (!tenant.enabled) ctx.out.note(`warning: tenant ${tenantId} is disabled`)
      if (!(await store.listIssuers()).some((i) => i.issuer === DEV_ISSUER)) {
        ctx.out.note('note: the dev issuer is registered when the server first starts with --dev')
      }
    })
    const ttlSec = Math.ceil(ttlMs / 1000)
    const token = await mintDevJwt(config.dataDir, { tenantId, subject, permissions, ttlSec, now })
    const expiresAt = (Math.floor(now / 1000) + ttlSec) * 1000
    if (ctx.json) {
      ctx.out.json({
        token,
        issuer: DEV_ISSUER,
        audience: DEV_AUDIENCE,
        tenantId,
        subject,
        permissions,
        expiresAt: isoTime(expiresAt),
      })
    } else {
      ctx.out.line(token)
      ctx.out.note(`expires ${formatTime(expiresAt)}; send it with X-Tenant-Id: ${tenantId}`)
    }
    return 0
  },
}

const REVOKE_KINDS = ['jti', 'sid', 'sub', 'tenant'] as const

const revoke: CommandDef = {
  path: ['jwt', 'revoke'],
  summary: "Refuse an issuer's JWTs by token id, session, subject or tenant",
  synopsis:
    '--issuer ISS (--jti ID | --sid SID | --sub SUB [--before TIME] | --tenant ID [--before TIME]) [--reason TEXT]',
  description:
    'Every instance refuses the matching tokens within a second (401 invalid_token), cached ones\nincluded. --sub and --tenant refuse the tokens issued (iat) before --before (default: now)\nand tokens without iat; later tokens pass. The rule expires by itself once every token it\ncould match has expired: its time (or now) + auth.maxJwtLifetimeSec + auth.clockToleranceSec.',
  options: {
    issuer: { type: 'string', value: 'ISS', description: "The trusted issuer's exact iss." },
    jti: { type: 'string', value: 'ID', description: 'Refuse the token with this jti.' },
    sid: { type: 'string', value: 'SID', description: 'Refuse every token of this session (sid).' },
    sub: {
      type: 'string',
      value: 'SUB',
      description: "Refuse this subject's tokens issued before --before.",
    },
    tenant: {
      type: 'string',
      value: 'ID',
      description: "Refuse this tenant's tokens issued before --before.",
    },
    before: {
      type: 'string',
      value: 'TIME',
      description:
        'With --sub or --tenant: issued before this time (ISO 8601, or 10m for ten minutes ago; default now).',
    },
    reason: { type: 'string', value: 'TEXT', description: 'Why (kept with the rule and audited).' },
  },
  examples: [
    'tokengate jwt revoke --issuer https://login.example.com/ --sub alice --reason "left the company"',
    'tokengate jwt revoke --issuer https://login.example.com/ --sid 5d1c0e2a --reason "stolen laptop"',
    'tokengate jwt revoke --issuer https://login.example.com/ --tenant acme --before 2026-01-31T12:00:00Z',
  ],
  async run(ctx) {
    const issuer = requiredString(ctx.args, 'issuer', "the issuer's exact iss")
    const given = REVOKE_KINDS.filter((kind) => optionalString(ctx.args, kind) !== undefined)
    if (given.length !== 1) {
      throw new UsageError('give exactly one of --jti, --sid, --sub or --tenant')
    }
    const kind = given[0] as (typeof REVOKE_KINDS)[number]
    const value = optionalString(ctx.args, kind) as string
    const now = ctx.now()
    const before = timeOption(ctx.args, 'before', now)
    if (before !== undefined && kind !== 'sub' && kind !== 'tenant') {
      throw new UsageError(
        `--before goes with --sub or --tenant (a --${kind} rule refuses every token carrying it)`,
      )
    }
    const reason = optionalString(ctx.args, 'reason')
    if (reason !== undefined) checkText(reason, 'reason', 500)
    const config = ctx.config(ADMIN_OVERRIDES)
    const rule = await withStore(config, (store) =>
      operate(
        () =>
          revokeJwts(
            { ...operationDeps(ctx, store), store },
            { issuer, kind, value, issuedBefore: before, reason },
            {
              maxLifetimeSec: config.auth.maxJwtLifetimeSec,
              clockToleranceSec: config.auth.clockToleranceSec,
              operatorIssuer: config.admin.oidc?.issuer,
            },
          ),
        { issuer_unknown: () => `no issuer ${printable(issuer)} (see: tokengate issuer list)` },
      ),
    )
    if (ctx.json) {
      ctx.out.json(jwtRevocationJson(rule))
      return 0
    }
    const bound =
      rule.issuedBefore === null ? '' : ` issued before ${formatTime(rule.issuedBefore)}`
    ctx.out.line(
      `Revoked ${kind} ${printable(value)} of ${printable(issuer)}${bound}: rule ${rule.id}.`,
    )
    ctx.out.note(
      `the rule expires ${formatTime(rule.expiresAt)}, when no token it matches is valid any more`,
    )
    return 0
  },
}

const revocationList: CommandDef = {
  path: ['jwt', 'revocations', 'list'],
  summary: 'List the JWT revocation rules in force',
  options: {},
  async run(ctx) {
    const rules = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      listJwtRevocations({ store, clock: { now: ctx.now } }),
    )
    if (ctx.json) {
      ctx.out.json({ revocations: rules.map(jwtRevocationJson) })
      return 0
    }
    ctx.out.table(
      ['ID', 'ISSUER', 'KIND', 'VALUE', 'ISSUED BEFORE', 'EXPIRES', 'BY', 'REASON'],
      rules.map((r) => [
        r.id,
        r.issuer,
        r.kind,
        r.value,
        formatTime(r.issuedBefore),
        formatTime(r.expiresAt),
        r.createdBy ?? '-',
        r.reason ?? '-',
      ]),
    )
    return 0
  },
}

const revocationRemove: CommandDef = {
  path: ['jwt', 'revocations', 'remove'],
  summary: 'Remove a JWT revocation rule before it expires (its tokens pass again)',
  synopsis: 'RULE_ID',
  options: {},
  positionals: 1,
  examples: ['tokengate jwt revocations remove jrv_3f9c...'],
  async run(ctx) {
    const id = requiredPositional(ctx.args, 0, 'RULE_ID')
    await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(() => removeJwtRevocation({ ...operationDeps(ctx, store), store }, id), {
        revocation_unknown: () =>
          `no JWT revocation rule ${printable(id)} (see: tokengate jwt revocations list)`,
      }),
    )
    if (ctx.json) ctx.out.json({ id, removed: true })
    else ctx.out.line(`Removed JWT revocation rule ${id}.`)
    return 0
  },
}

/** `jwt mint|revoke`, `jwt revocations list|remove`. */
export const jwtCommands: readonly CommandDef[] = [mint, revoke, revocationList, revocationRemove]
