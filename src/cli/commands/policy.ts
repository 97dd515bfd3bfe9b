import { readFile } from 'node:fs/promises'
import { parsePolicy } from '../../auth/policy/policy.ts'
import { GATEWAY_POLICY } from '../../auth/policy/reload.ts'
import { readStoredPolicy, removeStoredPolicy, storePolicy } from '../../auth/policy-operations.ts'
import { requiredPositional } from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, operationDeps, withStore } from '../context.ts'
import { CommandFailure } from '../errors.ts'
import { counted, isoTime } from '../output.ts'

const set: CommandDef = {
  path: ['policy', 'set'],
  summary: 'Store the gateway route policy (for gateway.policyStore)',
  synopsis: 'FILE',
  description:
    'Validates FILE (YAML or JSON, the format of docs/gateway.md) and stores it; every instance\nwith gateway.policyStore applies it within store.changePollMs, no SIGHUP needed. An invalid\nfile is refused with every problem as FILE:line:col and nothing is stored.',
  options: {},
  positionals: 1,
  examples: ['tokengate policy set gateway-policy.yaml'],
  async run(ctx) {
    const file = requiredPositional(ctx.args, 0, 'FILE')
    let text: string
    try {
      text = await readFile(file, 'utf8')
    } catch (error) {
      throw new CommandFailure(`cannot read ${file} (${(error as NodeJS.ErrnoException).code})`)
    }
    let rules: number
    try {
      rules = parsePolicy(text, file).rules.length
    } catch (error) {
      throw new CommandFailure((error as Error).message)
    }
    await withStore(
      ctx.config(ADMIN_OVERRIDES),
      (store) => storePolicy(operationDeps(ctx, store), { name: GATEWAY_POLICY, text, rules }),
      ctx.io,
    )
    if (ctx.json) ctx.out.json({ name: GATEWAY_POLICY, rules })
    else ctx.out.line(`Stored the gateway policy (${counted(rules, 'rule')}).`)
    return 0
  },
}

const show: CommandDef = {
  path: ['policy', 'show'],
  summary: 'Print the stored gateway route policy',
  options: {},
  async run(ctx) {
    const stored = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      readStoredPolicy({ store }, GATEWAY_POLICY),
    )
    if (!stored) throw new CommandFailure('no gateway policy is stored (the default applies)')
    if (ctx.json) {
      ctx.out.json({ name: stored.name, text: stored.text, updatedAt: isoTime(stored.updatedAt) })
    } else ctx.out.line(stored.text.trimEnd())
    return 0
  },
}

const remove: CommandDef = {
  path: ['policy', 'remove'],
  summary: 'Remove the stored gateway route policy (the default applies)',
  options: {},
  async run(ctx) {
    const removed = await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      removeStoredPolicy(operationDeps(ctx, store), GATEWAY_POLICY),
    )
    if (ctx.json) ctx.out.json({ removed })
    else
      ctx.out.line(removed ? 'Removed the stored gateway policy.' : 'No gateway policy was stored.')
    return 0
  },
}

/** `policy`. */
export const policyCommands: readonly CommandDef[] = [set, show, remove]
