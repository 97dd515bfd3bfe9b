/**
 * `tokengate apply -f FILE`: tenants, issuers, the gateway policy and existing keys' settings
 * from one declarative file, applied idempotently. Every entry is checked by the rules of the
 * command an operator would type (`tenant create|enable|disable|edit`, `issuer add|remove`,
 * `pat edit|enable|disable`), and every change runs that
 * command's operation, so their audit events are the ones applied; the file only says which
 * of them to run. All of them run in one store transaction: a store that fails or goes away
 * mid-way leaves nothing applied. Without --prune nothing absent from the file is touched.
 */
import { randomBytes } from 'node:crypto'
import { realpathSync } from 'node:fs'
import { readFile, rename, unlink, writeFile } from 'node:fs/promises'
import { dirname, isAbsolute, relative, resolve } from 'node:path'
import { isMap, isSeq, LineCounter, type Node, parse, parseDocument, stringify } from 'yaml'
import { addIssuer, removeIssuer } from '../../auth/issuer-operations.ts'
import type { OperationDeps } from '../../auth/operations.ts'
import { parsePolicy } from '../../auth/policy/policy.ts'
import { GATEWAY_POLICY } from '../../auth/policy/reload.ts'
import { removeStoredPolicy, storePolicy } from '../../auth/policy-operations.ts'
import { createTenant, editTenant, setTenantEnabled } from '../../auth/tenant-operations.ts'
import { MAX_TENANT_NAME_LENGTH } from '../../core/operator-text.ts'
import type { RateLimitOverride } from '../../core/ports.ts'
import type { StoredIssuer } from '../../stores/store.ts'
import { flag, optionalString, parseCommandArgs } from '../args.ts'
import {
  ADMIN_OVERRIDES,
  type CommandContext,
  type CommandDef,
  operate,
  operationDeps,
  withStore,
} from '../context.ts'
import { CommandFailure, UsageError } from '../errors.ts'
import { parseRate } from '../key-options.ts'
import { counted } from '../output.ts'
import { checkTenantId, checkText } from '../validate.ts'
import {
  type ApplyAction,
  type ApplyChange,
  canonicalJson,
  rateLimitArgs,
  sameRate,
  switchChange,
} from './apply-change.ts'
import { KEY_ENTRY_FIELDS, type KeyEntry, keyChanges } from './apply-keys.ts'
import { issuerCommands, readIssuerConfig } from './issuer.ts'
import { tenantCommands } from './tenant.ts'

/** A file entry: its path in the file for messages, and its value. */
interface Located<T> {
  readonly at: string
  readonly value: T
}

/** A tenant as the file states it; `name` and `rateLimit` undefined: not stated, left alone. */
interface DesiredTenant {
  readonly id: string
  readonly name: string | undefined
  readonly enabled: boolean
  /** null: back to `rateLimit.perTenant` (the file says `rateLimit: default`). */
  readonly rateLimit: RateLimitOverride | null | undefined
}

interface DesiredState {
  readonly tenants: readonly Located<DesiredTenant>[]
  readonly issuers: readonly Located<readonly string[]>[]
  readonly keys: readonly KeyEntry[]
  /** `file` undefined: the policy goes to the store (`gateway.policyStore`). */
  readonly policy?:
    | { readonly file: string | undefined; readonly text: string; readonly rules: number }
    | undefined
}

const TOP_KEYS = new Set(['tenants', 'issuers', 'gateway', 'keys'])
/** `apply --dry-run`'s exit code when the plan changes something (docs/cli.md). */
export const CHANGES_PENDING = 3
/** `issuer add` options whose value is a file, read relative to the applied file. */
const FILE_OPTIONS = new Set(['jwks-file', 'pem-file', 'secret-file'])

const apply: CommandDef = {
  path: ['apply'],
  summary: "Apply tenants, issuers, the gateway policy and keys' settings from a declarative file",
  synopsis: '-f FILE [--dry-run]',
  description:
    "FILE (YAML or JSON) lists tenants (id, name, enabled, rateLimit), issuers (keys are the options\nof issuer add), the gateway policy and existing keys' settings (id, name, permissions, enabled,\nrateLimit, quota, metadata, externalId, certificateThumbprint; apply never creates or revokes a key). Each change does what the matching tenant/issuer command does; applying the\nsame file twice changes nothing. Objects missing from the file are left alone (see --prune).\nEvery entry and reference is checked before the first write, and all changes are made in one\ntransaction: if any fails, none is applied. Files it names (key files, policyFile) must lie\ninside FILE's directory. --dry-run prints the plan (create / update / unchanged), changes\nnothing, and exits 3 when changes are pending (0 when none). After a policy change, send\nSIGHUP to the server to reload it.",
  options: {
    file: { type: 'string', short: 'f', value: 'FILE', description: 'The declarative file.' },
    'dry-run': { type: 'boolean', description: 'Print the plan; change nothing.' },
    prune: {
      type: 'boolean',
      description:
        'Also undo what the file does not list: issuers are removed, tenants disabled (never deleted), the stored policy removed.',
    },
  },
  examples: [
    'tokengate apply -f tokengate.apply.yaml --dry-run',
    'tokengate apply -f tokengate.apply.yaml',
  ],
  async run(ctx) {
    const file = optionalString(ctx.args, 'file')
    if (file === undefined) throw new UsageError('missing -f FILE')
    const dryRun = flag(ctx.args, 'dry-run')
    const desired = await readDesired(file)
    const changes = await plan(ctx, desired, flag(ctx.args, 'prune'), dryRun)
    const pending = changes.filter((c) => c.action !== 'unchanged').length
    if (!dryRun) await carryOut(ctx, changes, desired)
    if (ctx.json) ctx.out.json({ dryRun, changes })
    else {
      for (const change of changes) {
        const note = change.note ? ` (${change.note})` : ''
        ctx.out.line(`${change.action.padEnd(9)} ${change.kind} ${change.id}${note}`)
      }
      ctx.out.line(
        dryRun
          ? `Dry run: ${counted(pending, 'change')} planned, nothing applied.`
          : `Applied ${counted(pending, 'change')}.`,
      )
    }
    // As `terraform plan -detailed-exitcode` and `decK diff`, for CI: a plan with changes is
    // not an error (1) nor a usage error (2), so it has a code of its own.
    return dryRun && pending > 0 ? CHANGES_PENDING : 0
  },
}

/** Parses and checks the file's shape; problems name `file:line:col`. */
async function readDesired(file: string): Promise<DesiredState> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    throw new CommandFailure(`cannot read ${file} (${(error as NodeJS.ErrnoException).code})`)
  }
  const lineCounter = new LineCounter()
  const doc = parseDocument(text, { lineCounter, prettyErrors: false, uniqueKeys: true })
  const where = (node: Node | null | undefined) => {
    const offset = node?.range?.[0]
    if (offset === undefined) return file
    const pos = lineCounter.linePos(offset)
    return `${file}:${pos.line}:${pos.col}`
  }
  const fail = (node: Node | null | undefined, message: string): never => {
    throw new CommandFailure(`${where(node)}: ${message}`)
  }
  const [syntax] = doc.errors
  if (syntax) {
    const pos = lineCounter.linePos(syntax.pos[0])
    throw new CommandFailure(`${file}:${pos.line}:${pos.col}: ${syntax.message.split('\n')[0]}`)
  }
  const root = doc.contents
  if (!isMap(root)) return fail(root, 'expected a mapping with tenants, issuers, gateway')
  for (const pair of root.items) {
    const key = String((pair.key as { value?: unknown }).value)
    if (!TOP_KEYS.has(key))
      fail(pair.key as Node, `unknown key ${key} (expected tenants, issuers, gateway, keys)`)
  }
  const base = realpathSync(dirname(resolve(file)))
  /**
   * A path from the file, resolved against its directory, which it must not leave: a file
   * from a pull request must not make apply read (and quote) or overwrite anything else.
   */
  const inside = (node: Node, key: string, text: string): string => {
    const path = resolve(base, text)
    let real = path
    try {
      real = realpathSync(path)
    } catch {
      // Not there (yet): its directory decides.
      try {
        real = resolve(realpathSync(dirname(path)), relative(dirname(path), path))
      } catch {}
    }
    const rel = relative(base, real)
    if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) {
      fail(
        node,
        `${key}: ${text} is outside ${base}; files named in the file must lie inside its directory`,
      )
    }
    return real
  }
  const issuerOptions = commandNamed(['issuer', 'add']).options
  const list = (key: string): Node[] => {
    const node = root.get(key, true) as Node | undefined
    if (node === undefined) return []
    if (!isSeq(node)) return fail(node, `${key}: expected a list`)
    return node.items as Node[]
  }

  const tenants = list('tenants').map((node, i) => {
    const at = `${where(node)}: tenants[${i}]`
    const value = (node as { toJSON(): unknown }).toJSON() as Record<string, unknown>
    if (!isMap(node)) fail(node, `tenants[${i}]: expected a mapping with id`)
    for (const key of Object.keys(value)) {
      if (!['id', 'name', 'enabled', 'rateLimit'].includes(key)) {
        fail(node, `tenants[${i}]: unknown key ${key}`)
      }
    }
    if (typeof value.id !== 'string') return fail(node, `tenants[${i}].id: required`)
    if (value.name !== undefined && typeof value.name !== 'string') {
      fail(node, `tenants[${i}].name: expected a string`)
    }
    if (value.enabled !== undefined && typeof value.enabled !== 'boolean') {
      fail(node, `tenants[${i}].enabled: must be true or false`)
    }
    let rateLimit: RateLimitOverride | null | undefined
    if (value.rateLimit === 'default') rateLimit = null
    else if (typeof value.rateLimit === 'string') {
      try {
        rateLimit = parseRate(value.rateLimit, `tenants[${i}].rateLimit`)
      } catch (error) {
        fail(node, `${(error as Error).message} or default`)
      }
    } else if (value.rateLimit !== undefined) {
      fail(node, `tenants[${i}].rateLimit: expected N/WINDOW (e.g. 50000/1m) or default`)
    }
    return {
      at,
      value: {
        id: value.id,
        name: value.name as string | undefined,
        enabled: value.enabled !== false,
        rateLimit,
      },
    }
  })

  const issuers = list('issuers').map((node, i) => {
    if (!isMap(node)) return fail(node, `issuers[${i}]: expected a mapping of issuer add options`)
    const argv: string[] = []
    for (const [key, raw] of Object.entries((node as { toJSON(): object }).toJSON())) {
      // The command's own options only: a global one (data-dir, database-url, config) would
      // send this entry's write to another store.
      if (!Object.hasOwn(issuerOptions, key)) fail(node, `issuers[${i}]: unknown key ${key}`)
      const values = Array.isArray(raw) ? raw : [raw]
      if (key === 'algorithms' && Array.isArray(raw)) {
        argv.push('--algorithms', raw.join(','))
        continue
      }
      for (const value of values) {
        if (value === true) argv.push(`--${key}`)
        else if (value === false) continue
        else if (typeof value === 'string' || typeof value === 'number') {
          const text = String(value)
          argv.push(`--${key}`, FILE_OPTIONS.has(key) ? inside(node, key, text) : text)
        } else fail(node, `issuers[${i}].${key}: expected a string, a list of strings or true`)
      }
    }
    return { at: `${where(node)}: issuers[${i}]`, value: argv }
  })

  const keys = list('keys').map((node, i) => {
    if (!isMap(node)) return fail(node, `keys[${i}]: expected a mapping with id`)
    const value = (node as { toJSON(): Record<string, unknown> }).toJSON()
    for (const key of Object.keys(value)) {
      if (!(KEY_ENTRY_FIELDS as readonly string[]).includes(key)) {
        fail(node, `keys[${i}]: unknown key ${key}`)
      }
    }
    return { at: `${where(node)}: keys[${i}]`, value }
  })

  let policy: DesiredState['policy']
  const gateway = root.get('gateway', true) as Node | undefined
  if (gateway !== undefined) {
    if (!isMap(gateway))
      return fail(gateway, 'gateway: expected a mapping with policy (and policyFile)')
    for (const pair of gateway.items) {
      const key = String((pair.key as { value?: unknown }).value)
      if (key !== 'policy' && key !== 'policyFile') {
        fail(pair.key as Node, `gateway: unknown key ${key} (expected policy, policyFile)`)
      }
    }
    const target = gateway.get('policyFile')
    const rules = gateway.get('policy', true) as Node | undefined
    if (target !== undefined && typeof target !== 'string')
      return fail(gateway, 'gateway.policyFile: expected a file name')
    if (rules === undefined) return fail(gateway, 'gateway.policy: required')
    const policyText = stringify((rules as { toJSON(): unknown }).toJSON())
    let ruleCount = 0
    try {
      // The policy's own text, padded to where it sits in the file: the policy parser's
      // problems then carry this file's line and column.
      const [start = 0, , end = text.length] = rules.range ?? []
      const pos = lineCounter.linePos(start)
      const padded = '\n'.repeat(pos.line - 1) + ' '.repeat(pos.col - 1) + text.slice(start, end)
      ruleCount = parsePolicy(padded, file).rules.length
    } catch (error) {
      throw new CommandFailure(`gateway.policy: ${(error as Error).message}`)
    }
    policy = {
      file: target === undefined ? undefined : inside(gateway, 'gateway.policyFile', target),
      text: policyText,
      rules: ruleCount,
    }
  }
  return { tenants, issuers, keys, policy }
}

/**
 * Compares the file with the store (and the policy file) without changing anything; a dry
 * run needs an existing store, an apply may start a new one.
 */
async function plan(
  ctx: CommandContext,
  desired: DesiredState,
  prune: boolean,
  dryRun: boolean,
): Promise<ApplyChange[]> {
  // Parse the file's entries with the commands' own rules first, so a dry run reports them.
  const issuerArgs = desired.issuers.map((entry) => {
    try {
      const args = parseCommandArgs(entry.value, commandNamed(['issuer', 'add']).options, 0)
      return { at: entry.at, argv: entry.value, config: readIssuerConfig(args) }
    } catch (error) {
      throw new CommandFailure(`${entry.at}: ${(error as Error).message}`)
    }
  })
  for (const { at, value } of desired.tenants) {
    try {
      checkTenantId(value.id, 'id')
      if (value.name !== undefined) checkText(value.name, 'name', MAX_TENANT_NAME_LENGTH)
    } catch (error) {
      throw new CommandFailure(`${at}: ${(error as Error).message}`)
    }
  }

  const config = ctx.config(ADMIN_OVERRIDES)
  const { tenants, issuers, storedPolicy, keyPlan } = await withStore(
    config,
    async (store) => ({
      tenants: await store.listTenants(),
      issuers: await store.listIssuers(),
      storedPolicy: await store.getPolicy(GATEWAY_POLICY),
      keyPlan: await keyChanges(store, desired.keys, config.pat).catch((error: unknown) => {
        throw new CommandFailure((error as Error).message)
      }),
    }),
    dryRun ? undefined : ctx.io,
  )
  // Every reference checked before the first write: an issuer bound to a tenant needs that
  // tenant in the store or in the file, or apply would stop half way.
  const known = new Set([...tenants.map((t) => t.id), ...desired.tenants.map((t) => t.value.id)])
  for (const { at, config } of issuerArgs) {
    const fixed = config.tenant && 'fixed' in config.tenant ? config.tenant.fixed : undefined
    if (fixed !== undefined && !known.has(fixed)) {
      throw new CommandFailure(`${at}: tenant ${fixed} does not exist and is not in the file`)
    }
  }
  const changes: ApplyChange[] = []
  for (const { value } of desired.tenants) {
    const existing = tenants.find((t) => t.id === value.id)
    if (!existing) {
      const name = value.name ?? value.id
      changes.push({
        kind: 'tenant',
        id: value.id,
        action: 'create',
        command: ['tenant', 'create', value.id, '--name', name],
        run: (deps) => createTenant(deps, { id: value.id, name }),
      })
      if (value.rateLimit) changes.push(tenantEdit(value.id, { rateLimit: value.rateLimit }))
      if (!value.enabled) changes.push(tenantSwitch(value.id, false))
      continue
    }
    const edit = {
      ...(value.name !== undefined && value.name !== existing.name ? { name: value.name } : {}),
      ...(value.rateLimit !== undefined && !sameRate(value.rateLimit, existing.rateLimit ?? null)
        ? { rateLimit: value.rateLimit }
        : {}),
    }
    const edited = Object.keys(edit).length > 0
    if (edited) changes.push(tenantEdit(value.id, edit))
    if (existing.enabled !== value.enabled) changes.push(tenantSwitch(value.id, value.enabled))
    else if (!edited) changes.push({ kind: 'tenant', id: value.id, action: 'unchanged' })
  }
  for (const { argv, config } of issuerArgs) {
    const existing = issuers.find((i) => i.issuer === config.issuer)
    const command = ['issuer', 'add', ...argv]
    const run = (deps: OperationDeps) => addIssuer(deps, config)
    if (!existing) {
      changes.push({ kind: 'issuer', id: config.issuer, action: 'create', command, run })
    } else if (sameIssuer(existing, config)) {
      changes.push({ kind: 'issuer', id: config.issuer, action: 'unchanged' })
    } else
      changes.push({
        kind: 'issuer',
        id: config.issuer,
        action: 'update',
        note: 'replace',
        command,
        run,
      })
  }
  changes.push(...keyPlan)
  if (desired.policy) {
    const { file } = desired.policy
    const current = file ? await readFile(file, 'utf8').catch(() => undefined) : storedPolicy?.text
    const wanted = desired.policy.text
    // The store keeps the text as given (comments, order): compared as data there.
    const same = (text: string) =>
      file ? text === wanted : canonicalJson(parse(text)) === canonicalJson(parse(wanted))
    const action: ApplyAction =
      current === undefined ? 'create' : same(current) ? 'unchanged' : 'update'
    const note = file ? 'send SIGHUP to the server to reload' : 'every instance reloads it'
    const policy = desired.policy
    changes.push({
      kind: 'policy',
      id: file ?? `store:${GATEWAY_POLICY}`,
      action,
      ...(action === 'unchanged' ? {} : { note }),
      // A policy file is written by `carryOut` itself, once the store has committed.
      ...(file || action === 'unchanged'
        ? {}
        : { run: (deps: OperationDeps) => storePolicy(deps, { ...policy, name: GATEWAY_POLICY }) }),
    })
  }
  if (prune) {
    // What goes: nothing is deleted that cannot be brought back by applying again.
    const listed = new Set(desired.tenants.map((t) => t.value.id))
    for (const tenant of tenants) {
      if (listed.has(tenant.id) || !tenant.enabled) continue
      changes.push({
        ...tenantSwitch(tenant.id, false),
        note: 'disable (prune: not in the file)',
      })
    }
    const named = new Set(issuerArgs.map((i) => i.config.issuer))
    for (const issuer of issuers) {
      if (named.has(issuer.issuer)) continue
      changes.push({
        kind: 'issuer',
        id: issuer.issuer,
        action: 'remove',
        note: 'prune: not in the file',
        command: ['issuer', 'remove', issuer.issuer],
        run: (deps) => removeIssuer(deps, issuer.issuer),
      })
    }
    if (!desired.policy && storedPolicy) {
      changes.push({
        kind: 'policy',
        id: `store:${GATEWAY_POLICY}`,
        action: 'remove',
        note: 'prune: not in the file',
        run: (deps) => removeStoredPolicy(deps, GATEWAY_POLICY),
      })
    }
  }
  return changes
}

/** `tenant edit`: a new name, or the tenant's own rate limit (null: the default again). */
function tenantEdit(
  id: string,
  edit: { readonly name?: string; readonly rateLimit?: RateLimitOverride | null },
): ApplyChange {
  const command = ['tenant', 'edit', id]
  const notes: string[] = []
  if (edit.name !== undefined) {
    command.push('--name', edit.name)
    notes.push('rename')
  }
  rateLimitArgs(edit.rateLimit, command, notes)
  return {
    kind: 'tenant',
    id,
    action: 'update',
    note: notes.join(', '),
    command,
    run: (deps) => editTenant(deps, id, edit),
  }
}

function tenantSwitch(id: string, enabled: boolean): ApplyChange {
  return switchChange('tenant', id, enabled, (deps) => setTenantEnabled(deps, id, enabled))
}

/**
 * Runs every change in one store transaction, in plan order: the first failure (a refusal,
 * the store failing or going away) undoes them all (exit 1). A policy file is written aside
 * first and moved into place only once the store has committed.
 */
async function carryOut(
  ctx: CommandContext,
  changes: readonly ApplyChange[],
  desired: DesiredState,
) {
  const file = desired.policy?.file
  const policyFile = changes.some((c) => c.kind === 'policy' && c.action !== 'unchanged')
    ? file
    : undefined
  // Write-then-rename: the server never reads a half-written policy.
  const temp = policyFile && `${policyFile}.${randomBytes(4).toString('hex')}.tmp`
  try {
    if (temp) await writeFile(temp, desired.policy?.text ?? '', { mode: 0o600 })
    await operate(() =>
      withStore(
        ctx.config(ADMIN_OVERRIDES),
        (store) =>
          store.transaction(async (tx) => {
            const deps = operationDeps(ctx, tx)
            for (const change of changes) await change.run?.(deps)
          }),
        ctx.io,
      ),
    )
    if (temp && policyFile) await rename(temp, policyFile)
  } catch (error) {
    if (temp) await unlink(temp).catch(() => {})
    if (error instanceof CommandFailure) {
      throw new CommandFailure(`${error.message}; nothing was applied`)
    }
    throw new CommandFailure(`${(error as Error).message}; nothing was applied`, { cause: error })
  }
}

function commandNamed(path: readonly string[]): CommandDef {
  const def = [...tenantCommands, ...issuerCommands].find(
    (c) => c.path.length === path.length && c.path.every((w, i) => w === path[i]),
  )
  if (!def) throw new Error(`bug: no command ${path.join(' ')}`)
  return def
}

/** The stored issuer is what `issuer add` would store now (its `createdAt` aside). */
function sameIssuer(stored: StoredIssuer, config: object): boolean {
  const { createdAt: _createdAt, ...rest } = stored
  return canonicalJson(rest) === canonicalJson(config)
}

/** `apply`. */
export const applyCommands: readonly CommandDef[] = [apply]
