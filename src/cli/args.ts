import { parseArgs } from 'node:util'
import { UsageError } from './errors.ts'

/** One command-line option of a command. */
export interface OptionDef {
  readonly type: 'string' | 'boolean'
  readonly multiple?: boolean
  readonly short?: string
  /** Placeholder shown in help, e.g. `ID` in `--tenant ID`. */
  readonly value?: string
  readonly description: string
}

export type OptionDefs = Readonly<Record<string, OptionDef>>

/** What a command receives after parsing: option values by name, and positionals. */
export interface ParsedArgs {
  readonly values: Readonly<Record<string, string | boolean | string[] | undefined>>
  readonly positionals: readonly string[]
}

/** Options every command accepts. */
export const GLOBAL_OPTIONS: OptionDefs = {
  config: { type: 'string', value: 'FILE', description: 'Config file (JSON or YAML).' },
  'data-dir': {
    type: 'string',
    value: 'DIR',
    description: 'Data directory (default ./.tokengate, or TOKENGATE_DATA_DIR).',
  },
  'database-url': {
    type: 'string',
    value: 'URL',
    description: 'Postgres URL instead of the embedded SQLite store (or DATABASE_URL).',
  },
  json: { type: 'boolean', description: 'Machine-readable output: one JSON document on stdout.' },
  help: { type: 'boolean', short: 'h', description: 'Show help for this command.' },
}

/** Global options that take a value, for finding the command words among them. */
const GLOBAL_VALUE_OPTIONS = new Set(
  Object.entries(GLOBAL_OPTIONS)
    .filter(([, def]) => def.type === 'string')
    .map(([name]) => `--${name}`),
)
const GLOBAL_FLAGS = new Set([
  ...Object.keys(GLOBAL_OPTIONS).map((name) => `--${name}`),
  '-h',
  '--version',
])

/**
 * Splits the leading command words (`pat`, `issue`) off argv, skipping global options placed
 * before or between them, so `tokengate --data-dir x pat list` works. `isWord` decides
 * whether `candidate` continues the command given the words so far. Returns the words and
 * the remaining arguments in their original order; `refused` is the first plain word that did
 * not continue the command (a positional argument, or a misspelt command).
 */
export function takeCommandWords(
  argv: readonly string[],
  isWord: (words: readonly string[], candidate: string) => boolean,
): { words: string[]; rest: string[]; refused: string | undefined } {
  const words: string[] = []
  const rest: string[] = []
  let refused: string | undefined
  let i = 0
  for (; i < argv.length; i++) {
    const arg = argv[i] as string
    if (arg.startsWith('-')) {
      if (!GLOBAL_FLAGS.has(arg.split('=')[0] as string)) break
      rest.push(arg)
      if (GLOBAL_VALUE_OPTIONS.has(arg) && i + 1 < argv.length) rest.push(argv[++i] as string)
    } else if (isWord(words, arg)) {
      words.push(arg)
    } else {
      refused = arg
      break
    }
  }
  rest.push(...argv.slice(i))
  return { words, rest, refused }
}

/**
 * Parses a command's arguments strictly. Unknown flags, missing values and surplus
 * positionals become a UsageError that names the problem.
 */
export function parseCommandArgs(
  args: readonly string[],
  options: OptionDefs,
  maxPositionals: number,
): ParsedArgs {
  const all = { ...GLOBAL_OPTIONS, ...options }
  const config: Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }> =
    {}
  for (const [name, def] of Object.entries(all)) {
    config[name] = {
      type: def.type,
      ...(def.multiple ? { multiple: true } : {}),
      ...(def.short ? { short: def.short } : {}),
    }
  }
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({
      args: withDashValues(args, all),
      options: config,
      strict: true,
      allowPositionals: true,
    })
  } catch (error) {
    throw new UsageError(describeParseError(error as Error & { code?: string }, all))
  }
  if (parsed.positionals.length > maxPositionals) {
    const extra = parsed.positionals[maxPositionals] as string
    throw new UsageError(`unexpected argument '${extra}'`)
  }
  return {
    values: parsed.values as ParsedArgs['values'],
    positionals: parsed.positionals,
  }
}

/**
 * A value option followed by a word that starts with '-' but names no option takes it as its
 * value (`--cert-thumbprint -Xq...`: a base64url thumbprint starts with '-' once in 64);
 * parseArgs refuses such a value unless it is written `--name=VALUE`.
 */
function withDashValues(args: readonly string[], options: OptionDefs): string[] {
  const shorts = new Set(Object.values(options).flatMap((def) => (def.short ? [def.short] : [])))
  const names = new Set(Object.keys(options))
  const out: string[] = []
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string
    const next = args[i + 1]
    const name = arg.startsWith('--') && !arg.includes('=') ? arg.slice(2) : undefined
    if (arg === '--') {
      out.push(...args.slice(i))
      break
    }
    if (
      name !== undefined &&
      options[name]?.type === 'string' &&
      next?.startsWith('-') &&
      next !== '--' &&
      !names.has(next.replace(/^--?/, '').split('=')[0] as string) &&
      !(next.length === 2 && shorts.has(next.slice(1)))
    ) {
      out.push(`${arg}=${next}`)
      i++
      continue
    }
    out.push(arg)
  }
  return out
}

function describeParseError(error: Error & { code?: string }, options: OptionDefs): string {
  const quoted = /'(-{1,2}[^'\s]+)/.exec(error.message)?.[1]
  switch (error.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option '${quoted ?? error.message}'`
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const name = quoted?.replace(/^-+/, '').split(/[ =]/)[0]
      const def = name === undefined ? undefined : options[name]
      if (def?.type === 'string')
        return `option --${name} expects a value (${def.value ?? 'VALUE'})`
      if (def?.type === 'boolean') return `option --${name} does not take a value`
      return error.message
    }
    default:
      return error.message
  }
}

/** A string option, or undefined when absent. Empty strings are refused. */
export function optionalString(args: ParsedArgs, name: string): string | undefined {
  const value = args.values[name]
  if (value === undefined) return undefined
  if (typeof value !== 'string') return undefined
  if (value === '') throw new UsageError(`option --${name} must not be empty`)
  return value
}

/** A required string option; `expected` describes it for the error (`a tenant id`). */
export function requiredString(args: ParsedArgs, name: string, expected: string): string {
  const value = optionalString(args, name)
  if (value === undefined) throw new UsageError(`missing --${name}: expected ${expected}`)
  return value
}

/** A repeatable string option: every value given, in order. */
export function stringList(args: ParsedArgs, name: string): string[] {
  const value = args.values[name]
  const list = Array.isArray(value) ? value : typeof value === 'string' ? [value] : []
  for (const item of list) {
    if (item === '') throw new UsageError(`option --${name} must not be empty`)
  }
  return list
}

/** A boolean option. */
export function flag(args: ParsedArgs, name: string): boolean {
  return args.values[name] === true
}

/** A required positional argument; `name` is how help spells it (`TOKEN_ID`). */
export function requiredPositional(args: ParsedArgs, index: number, name: string): string {
  const value = args.positionals[index]
  if (value === undefined || value === '') throw new UsageError(`missing argument ${name}`)
  return value
}
