import { flag, optionalString, requiredString, stringList } from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, withStore } from '../context.ts'
import { formatDuration, parseDuration } from '../durations.ts'
import { CommandFailure, UsageError } from '../errors.ts'
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

/** `jwt mint`. */
export const jwtCommands: readonly CommandDef[] = [mint]
