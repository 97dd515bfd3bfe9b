import { OperationRefused } from '../../auth/operations.ts'
import {
  createTenant,
  editTenant,
  listTenants,
  setTenantEnabled,
  tenantMetadata,
} from '../../auth/tenant-operations.ts'
import { readUsageSeries, usageRange, usageView } from '../../auth/usage.ts'
import { MAX_TENANT_NAME_LENGTH } from '../../core/operator-text.ts'
import { flag, optionalString, requiredPositional } from '../args.ts'
import {
  ADMIN_OVERRIDES,
  type CommandContext,
  type CommandDef,
  operate,
  operationDeps,
  withStore,
} from '../context.ts'
import { UsageError } from '../errors.ts'
import {
  editedField,
  formatRate,
  rateLimitOption,
  USAGE_OPTIONS,
  usageRangeOption,
} from '../key-options.ts'
import { formatTime } from '../output.ts'
import { printUsage } from '../usage-output.ts'
import { checkTenantId, checkText, printable } from '../validate.ts'

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
    const tenant = await withStore(
      ctx.config(ADMIN_OVERRIDES),
      (store) => operate(() => createTenant(operationDeps(ctx, store), { id, name })),
      ctx.io,
    )
    if (ctx.json) ctx.out.json(tenantMetadata(tenant))
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
      ctx.out.json({ tenants: tenants.map(tenantMetadata) })
      return 0
    }
    ctx.out.table(
      ['ID', 'NAME', 'STATUS', 'RATE LIMIT', 'CREATED'],
      tenants.map((t) => [
        t.id,
        t.name,
        t.enabled ? 'enabled' : 'disabled',
        t.rateLimit ? formatRate(t.rateLimit) : 'default',
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
  if (ctx.json) ctx.out.json({ ...tenantMetadata(tenant), changed })
  else
    ctx.out.line(changed ? `Tenant ${id} is now ${state}.` : `Tenant ${id} was already ${state}.`)
  return 0
}

const edit: CommandDef = {
  path: ['tenant', 'edit'],
  summary: "Change a tenant's name or its own rate limit",
  synopsis: 'ID [--name NAME] [--rate-limit N/WINDOW | --clear-rate-limit]',
  description:
    '--rate-limit replaces rateLimit.perTenant for this tenant: requests per window across all\nits tokens, on every instance (shared through Redis when configured). Every running instance\napplies it within a second; audited as tenant.updated with the values before and after.',
  options: {
    name: { type: 'string', value: 'NAME', description: 'New display name.' },
    'rate-limit': {
      type: 'string',
      value: 'N/WINDOW',
      description: "The tenant's own request rate, e.g. 50000/1m.",
    },
    'clear-rate-limit': { type: 'boolean', description: 'Back to rateLimit.perTenant.' },
  },
  positionals: 1,
  examples: [
    'tokengate tenant edit acme --rate-limit 50000/1m',
    'tokengate tenant edit acme --name "Acme Corp"',
  ],
  async run(ctx) {
    const id = checkTenantId(requiredPositional(ctx.args, 0, 'ID'), 'ID')
    const name = optionalString(ctx.args, 'name')
    const rateLimit = editedField(ctx.args, 'rate-limit', rateLimitOption(ctx.args))
    const { tenant, changed } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(
        () =>
          editTenant(operationDeps(ctx, store), id, {
            name: name === undefined ? undefined : checkText(name, 'name', MAX_TENANT_NAME_LENGTH),
            rateLimit,
          }),
        { tenant_unknown: () => `no tenant ${id} (see: tokengate tenant list)` },
      ),
    )
    if (ctx.json) ctx.out.json({ ...tenantMetadata(tenant), changed })
    else ctx.out.line(changed ? `Updated tenant ${id}.` : `Tenant ${id}: nothing to change.`)
    return 0
  },
}

const usage: CommandDef = {
  path: ['tenant', 'usage'],
  summary: "A tenant's requests by outcome per minute, hour or day, and its busiest keys",
  synopsis: 'ID [--resolution minute|hour|day] [--since TIME] [--until TIME] [--csv] [--top N]',
  options: {
    ...USAGE_OPTIONS,
    top: { type: 'string', value: 'N', description: 'Also list the N busiest keys (1-100).' },
  },
  positionals: 1,
  examples: ['tokengate tenant usage acme --resolution day --top 10'],
  async run(ctx) {
    const id = checkTenantId(requiredPositional(ctx.args, 0, 'ID'), 'ID')
    const now = ctx.now()
    const range = usageRangeOption(ctx.args, now)
    const topText = optionalString(ctx.args, 'top')
    const top = topText === undefined ? 0 : Number(topText)
    if (!(Number.isInteger(top) && top >= 0 && top <= 100)) {
      throw new UsageError(`--top: '${printable(topText ?? '')}' is not a number from 1 to 100`)
    }
    const { series, keys } = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(async () => {
        if (!(await store.findTenant(id)))
          throw new OperationRefused('tenant_unknown', id, `no tenant ${id}`)
        const series = await readUsageSeries(store, 'tenant', id, range, now)
        const { resolution, since, until } = usageRange(range, now)
        const keys = top > 0 ? await store.topKeys(id, resolution, since, until, top) : []
        return { series, keys }
      }),
    )
    if (ctx.json && !flag(ctx.args, 'csv')) {
      ctx.out.json({ ...usageView(series), topKeys: keys })
      return 0
    }
    printUsage(ctx, series)
    if (keys.length > 0 && !flag(ctx.args, 'csv')) {
      ctx.out.line()
      ctx.out.table(
        ['KEY', 'ALLOWED', '401', '403', '429'],
        keys.map((k) => [
          k.tokenId,
          String(k.allowed),
          String(k.unauthorized),
          String(k.forbidden),
          String(k.limited),
        ]),
      )
    }
    return 0
  },
}

/** `tenant create|list|edit|disable|enable|usage`. */
export const tenantCommands: readonly CommandDef[] = [
  create,
  list,
  edit,
  setEnabled(false),
  setEnabled(true),
  usage,
]
