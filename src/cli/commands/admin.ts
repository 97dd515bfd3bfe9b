import {
  ADMIN_ROLES,
  ADMIN_TOKEN_NAME,
  adminTokenMetadata,
  adminTokenStatus,
  issueAdminToken,
  MAX_ADMIN_TOKEN_LIFETIME_MS,
  revokeAdminToken,
} from '../../auth/admin-tokens.ts'
import type { AdminRole } from '../../stores/admin-store.ts'
import { optionalString, requiredPositional, requiredString } from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, operate, operationDeps, withStore } from '../context.ts'
import { formatDuration, parseDuration } from '../durations.ts'
import { UsageError } from '../errors.ts'
import { formatTime } from '../output.ts'
import { checkText, printable } from '../validate.ts'

const MAX_LIFETIME = formatDuration(MAX_ADMIN_TOKEN_LIFETIME_MS)

const issue: CommandDef = {
  path: ['admin', 'token', 'issue'],
  summary: 'Issue an admin token for the admin API and console (printed once)',
  synopsis: '--name NAME --role read-only|operator [--expires-in DURATION]',
  description: `Admin tokens (tga_...) are operator credentials, not API tokens: they work only on the\nadmin listener. NAME is who holds it; it is the actor on the audit events of their actions.\nOnly the SHA-256 is stored: the token is printed once. They always expire (at most ${MAX_LIFETIME}).`,
  options: {
    name: { type: 'string', value: 'NAME', description: 'Who holds the token, e.g. alice.' },
    role: {
      type: 'string',
      value: 'ROLE',
      description: 'read-only (look only) or operator (may change things).',
    },
    'expires-in': {
      type: 'string',
      value: 'DURATION',
      description: `Lifetime, e.g. 8h, 30d (default 30d, at most ${MAX_LIFETIME}).`,
    },
  },
  examples: ['tokengate admin token issue --name alice --role operator --expires-in 7d'],
  async run(ctx) {
    const name = checkText(requiredString(ctx.args, 'name', 'who holds the token'), 'name', 100)
    if (!ADMIN_TOKEN_NAME.test(name)) {
      throw new UsageError('--name: expected 1-100 characters of A-Z a-z 0-9 . _ @ -')
    }
    const role = requiredString(ctx.args, 'role', 'read-only or operator')
    if (!ADMIN_ROLES.includes(role as AdminRole)) {
      throw new UsageError(
        `--role: '${printable(role)}' is not a role (expected read-only or operator)`,
      )
    }
    const text = optionalString(ctx.args, 'expires-in') ?? '30d'
    const ms = parseDuration(text)
    if (ms === undefined || ms > MAX_ADMIN_TOKEN_LIFETIME_MS) {
      throw new UsageError(
        `--expires-in: '${printable(text)}' is not a duration up to ${MAX_LIFETIME} (expected e.g. 8h, 30d)`,
      )
    }
    const { token, record } = await withStore(
      ctx.config(ADMIN_OVERRIDES),
      (store) =>
        operate(() =>
          issueAdminToken(
            { ...operationDeps(ctx, store), store },
            {
              name,
              role: role as AdminRole,
              lifetimeMs: ms,
            },
          ),
        ),
      ctx.io,
    )
    if (ctx.json) {
      ctx.out.json({ token, ...adminTokenMetadata(record, record.createdAt) })
      return 0
    }
    ctx.out.line(`Issued admin token ${record.id} for ${record.name} (${record.role}).`)
    ctx.out.line(`  expires:      ${formatTime(record.expiresAt)}`)
    ctx.out.line()
    ctx.out.line('Admin token (shown once: it will not be shown again and cannot be recovered):')
    ctx.out.line()
    ctx.out.line(`  ${token}`)
    ctx.out.line()
    return 0
  },
}

const list: CommandDef = {
  path: ['admin', 'token', 'list'],
  summary: 'List admin tokens (metadata only)',
  options: {},
  async run(ctx) {
    const now = ctx.now()
    const tokens = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      store.admin.listAdminTokens(),
    )
    if (ctx.json) {
      ctx.out.json({ tokens: tokens.map((t) => adminTokenMetadata(t, now)) })
      return 0
    }
    ctx.out.table(
      ['ID', 'TOKEN', 'NAME', 'ROLE', 'STATUS', 'EXPIRES'],
      tokens.map((t) => [
        t.id,
        `tga_…${t.last4}`,
        t.name,
        t.role,
        adminTokenStatus(t, now),
        formatTime(t.expiresAt),
      ]),
    )
    return 0
  },
}

const revoke: CommandDef = {
  path: ['admin', 'token', 'revoke'],
  summary: 'Revoke an admin token now (its console sessions end on their next request)',
  synopsis: 'ID',
  options: {},
  positionals: 1,
  examples: ['tokengate admin token revoke adm_3kq9...'],
  async run(ctx) {
    const id = requiredPositional(ctx.args, 0, 'ID')
    const result = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(() => revokeAdminToken({ ...operationDeps(ctx, store), store }, id), {
        token_unknown: () => `no admin token ${printable(id)} (see: tokengate admin token list)`,
      }),
    )
    if (ctx.json)
      ctx.out.json({ ...adminTokenMetadata(result.record, ctx.now()), changed: result.changed })
    else ctx.out.line(result.changed ? `Revoked admin token ${id}.` : `${id} was already revoked.`)
    return 0
  },
}

const openapi: CommandDef = {
  path: ['admin', 'openapi'],
  summary: 'Print the OpenAPI 3.1 document of the admin API as JSON',
  options: {},
  examples: ['tokengate admin openapi > admin-openapi.json'],
  async run(ctx) {
    const { adminOpenApiDocument } = await import('../../admin/openapi.ts')
    ctx.out.json(adminOpenApiDocument())
    return 0
  },
}

/** `admin token issue|list|revoke`, `admin openapi`. */
export const adminCommands: readonly CommandDef[] = [issue, list, revoke, openapi]
