import { GLOBAL_OPTIONS, type OptionDefs } from './args.ts'
import type { CommandDef } from './context.ts'

/** Command groups and their one-line summaries. */
export const GROUPS: Readonly<Record<string, string>> = {
  tenant: 'Manage tenants',
  pat: 'Manage Personal Access Tokens',
  issuer: 'Manage trusted JWT issuers',
  jwt: 'Mint dev-mode JWT access tokens',
  policy: 'The gateway route policy kept in the store (gateway.policyStore)',
  admin: 'Admin API and console: operator tokens, OpenAPI document',
}

const EXIT_CODES =
  'Exit codes: 0 ok, 1 operation failed, 2 usage error, 3 apply --dry-run: changes pending.'

/** `tokengate --help`. */
export function mainHelp(commands: readonly CommandDef[], version: string): string {
  const width = Math.max(...commands.map((c) => c.path.join(' ').length))
  return [
    `tokengate ${version}: operator CLI of the tokengate API gateway`,
    '',
    'Usage: tokengate <command> [options]',
    '',
    'Commands:',
    ...commands.map((c) => `  ${c.path.join(' ').padEnd(width)}  ${c.summary}`),
    `  ${'help [COMMAND]'.padEnd(width)}  Show help`,
    '',
    'Global options:',
    ...formatOptions({
      ...GLOBAL_OPTIONS,
      version: { type: 'boolean', description: 'Print the version.' },
    }),
    '',
    EXIT_CODES,
    "Run 'tokengate <command> --help' for a command's options; docs/cli.md has examples.",
    '',
  ].join('\n')
}

/** `tokengate pat --help`: the group's subcommands. */
export function groupHelp(group: string, commands: readonly CommandDef[]): string {
  const members = commands.filter((c) => c.path[0] === group)
  const width = Math.max(...members.map((c) => c.path.join(' ').length))
  return [
    `${GROUPS[group] ?? group}.`,
    '',
    `Usage: tokengate ${group} <command> [options]`,
    '',
    'Commands:',
    ...members.map((c) => `  ${c.path.join(' ').padEnd(width)}  ${c.summary}`),
    '',
    `Run 'tokengate ${group} <command> --help' for its options.`,
    '',
  ].join('\n')
}

/** One command's help: usage, description, options, global options, examples. */
export function commandHelp(command: CommandDef): string {
  const name = command.path.join(' ')
  const lines = [
    `Usage: tokengate ${name}${command.synopsis ? ` ${command.synopsis}` : ''} [--json]`,
    '',
    `${command.summary}.`,
  ]
  if (command.description) lines.push('', command.description)
  if (Object.keys(command.options).length > 0) {
    lines.push('', 'Options:', ...formatOptions(command.options))
  }
  lines.push('', 'Global options:', ...formatOptions(GLOBAL_OPTIONS))
  if (command.examples?.length) {
    lines.push('', 'Examples:', ...command.examples.map((e) => `  ${e}`))
  }
  lines.push('', EXIT_CODES, '')
  return lines.join('\n')
}

function formatOptions(options: OptionDefs): string[] {
  const entries = Object.entries(options).map(([name, def]) => {
    const short = def.short ? `-${def.short}, ` : ''
    const value = def.type === 'string' ? ` ${def.value ?? 'VALUE'}` : ''
    const repeat = def.multiple ? '...' : ''
    return [`${short}--${name}${value}${repeat}`, def.description] as const
  })
  const width = Math.max(...entries.map(([left]) => left.length))
  return entries.map(([left, text]) => `  ${left.padEnd(width)}  ${text}`)
}
