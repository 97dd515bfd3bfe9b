import { createTenant, listTenants, setTenantEnabled } from '../../auth/tenant-operations.ts'
import { MAX_TENANT_NAME_LENGTH } from '../../core/operator-text.ts'
import type { Tenant } from '../../core/ports.ts'
import { optionalString, requiredPositional } from '../args.ts'
import {
  ADMIN_OVERRIDES,
  type CommandContext,
  type CommandDef,
  operate,
  operationDeps,
  withStore,
} from '../context.ts'
import { formatTime, isoTime } from '../output.ts'
import { checkTenantId, checkText } from '../validate.ts'

/** The tenant as JSON output shows it. */
export function tenantJson(tenant: Tenant) {
  return {
    id: tenant.id,
    name: tenant.name,
    enabled: tenant.enabled,
    createdAt: isoTime(tenant.createdAt),
  }
}

const create: CommandDef = {
  path: ['tenant', 'create'],
  summary: 'Create a tenant',
  synopsis: 'ID [--name NAME]',
  description:
    'ID is the exact X-Tenant-Id value callers send: 1-64 characters of A-Z a-z 0-9 . _ -,\ncompared byte for byte (case-sensitive).',
  options: {
    name: { type: 'string', value: 'NAME', description: 'Display name (default: the id).' },
  },
  positionals: 1,
  examples: ['tokengate tenant create acme --name "Acme Corp"'],
  async run(ctx) {
    const id = checkTenantId(requiredPositional(ctx.args, 0, 'ID'), 'ID')
    const name = checkText(optionalString(ctx.args, 'name') ?? id, 'name', MAX_TENANT_NAME_LENGTH)
    const tenant = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(() => createTenant(operationDeps(ctx, store), { id, name })),
    )
    if (ctx.json) ctx.out.json(tenantJson(tenant))
    else ctx.out.line(`Created tenant ${tenant.id} (${tenant.name}).`)
    return 0
  },
}

const list: CommandDef = {
  path: ['tenant', 'list'],
  summary: 'List tenants',
  options: {},
  async run(ctx) {
    const tenants = await withStore(ctx.config(ADMIN_OVERRIDES), (store) => listTenants({ store }))
    if (ctx.json) {
      ctx.out.json({ tenants: tenants.map(tenantJson) })
      return 0
    }
    ctx.out.table(
      ['ID', 'NAME', 'STATUS', 'CREATED'],
      tenants.map((t) => [
        t.id,
        t.name,
        t.enabled ? 'enabled' : 'disabled',
        formatTime(t.createdAt),
      ]),
    )
    return 0
  },
}

function setEnabled(enabled: boolean): CommandDef {
  const verb = enabled ? 'enable' : 'disable'
  return {
    path: ['tenant', verb],
    summary: enabled
      ? 'Enable a tenant again'
      : 'Disable a tenant: its PATs and JWTs are rejected until it is enabled',
    synopsis: 'ID',
    options: {},
    positionals: 1,
    examples: [`tokengate tenant ${verb} acme`],
    run: (ctx) => changeEnabled(ctx, enabled),
  }
}

async function changeEnabled(ctx: CommandContext, enabled: boolean): Promise<number> {
  const id = checkTenantId(requiredPositional(ctx.args, 0, 'ID'), 'ID')
  const state = enabled ? 'enabled' : 'disabled'
  const { tenant, changed } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
    operate(() => setTenantEnabled(operationDeps(ctx, store), id, enabled), {
      tenant_unknown: () => `no tenant ${id} (see: tokengate tenant list)`,
    }),
  )
  if (ctx.json) ctx.out.json({ ...tenantJson(tenant), changed })
  else
    ctx.out.line(changed ? `Tenant ${id} is now ${state}.` : `Tenant ${id} was already ${state}.`)
  return 0
}

/** `tenant create|list|disable|enable`. */
export const tenantCommands: readonly CommandDef[] = [
  create,
  list,
  setEnabled(false),
  setEnabled(true),
]
