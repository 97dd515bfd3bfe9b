/**
 * A bench script's command line, parsed once and strictly (node:util `parseArgs`): an unknown
 * flag, a missing value, a bad number or pattern, or a wrong count of arguments stops the
 * script with the message and its usage on stderr, exit code 2, before it starts anything
 * (a mistyped flag once started a full, unlocked bench); `--help` prints the usage, exit 0.
 *
 *   const { values, positionals } = readCli({
 *     script: 'bench/keys.bench.ts',
 *     options: { rounds: { type: 'number', integer: true, default: 60 }, json: { type: 'boolean' } },
 *   })
 */
import { parseArgs } from 'node:util'

export type Flag =
  | { readonly type: 'boolean' }
  | { readonly type: 'string'; readonly default?: string; readonly value?: string }
  /** Repeatable: every value, in order. */
  | { readonly type: 'strings'; readonly value?: string }
  /** Node flags for a child process, e.g. `--flags-b --no-maglev`: the value may start with `-`. */
  | { readonly type: 'flags'; readonly default?: string }
  /** Positive unless `zero` (then 0 too, e.g. "off"); `integer`: a whole number. */
  | {
      readonly type: 'number'
      /** Without one, undefined when not given (a default the script derives itself). */
      readonly default?: number
      readonly integer?: boolean
      readonly zero?: boolean
      readonly value?: string
    }
  | { readonly type: 'regex'; readonly default?: RegExp }
  | { readonly type: 'choice'; readonly choices: readonly string[]; readonly default: string }

type ValueOf<F extends Flag> = F extends { type: 'boolean' }
  ? boolean
  : F extends { type: 'number' }
    ? F extends { default: number }
      ? number
      : number | undefined
    : F extends { type: 'strings' }
      ? string[]
      : F extends { type: 'choice'; choices: readonly (infer C)[] }
        ? C
        : F extends { type: 'regex' }
          ? F extends { default: RegExp }
            ? RegExp
            : RegExp | undefined
          : F extends { default: string }
            ? string
            : string | undefined

export type Values<O extends Record<string, Flag>> = { -readonly [K in keyof O]: ValueOf<O[K]> }

export interface Cli<O extends Record<string, Flag>> {
  /** As run from the repository's root, e.g. `bench/compare.ts`: the usage names it. */
  readonly script: string
  /** How people run it when not `node <script>`, e.g. `npm run bench --`: the usage's start. */
  readonly command?: string
  readonly options: O
  /** The arguments besides flags, e.g. `['<checkoutA>', '<checkoutB>']`; `[x]`: optional. */
  readonly positionals?: readonly string[]
  /** Flags no one types (a script's own child processes): parsed, left out of the usage. */
  readonly internal?: readonly (keyof O)[]
}

export type Parsed<O extends Record<string, Flag>> =
  | { readonly kind: 'parsed'; readonly values: Values<O>; readonly positionals: string[] }
  | { readonly kind: 'help' }
  | { readonly kind: 'error'; readonly message: string }

/** The one-line synopsis `--help` prints, from the options themselves. */
export function usageOf<O extends Record<string, Flag>>(cli: Cli<O>): string {
  const flags = Object.entries(cli.options)
    .filter(([name]) => !cli.internal?.includes(name))
    .map(([name, flag]) => `[--${name}${placeholder(flag)}]`)
  const command = cli.command ?? `node ${cli.script}`
  return ['Usage:', command, ...(cli.positionals ?? []), ...flags, '[--help]'].join(' ')
}

function placeholder(flag: Flag): string {
  switch (flag.type) {
    case 'boolean':
      return ''
    case 'number':
      return ` ${flag.value ?? 'N'}${flag.default === undefined ? '' : ` (${flag.default})`}`
    case 'choice':
      return ` ${flag.choices.join('|')} (${flag.default})`
    case 'regex':
      return ' REGEX'
    case 'flags':
      return " 'FLAGS'"
    case 'strings':
      return ` ${flag.value ?? 'VALUE'}...`
    default:
      return ` ${flag.value ?? 'VALUE'}${flag.default ? ` (${flag.default})` : ''}`
  }
}

/** Parses `args` against `cli` without printing or exiting (readCli does both). */
export function parseCli<const O extends Record<string, Flag>>(
  cli: Cli<O>,
  args: readonly string[],
): Parsed<O> {
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({
      args: joinDashValues(cli.options, args),
      strict: true,
      allowPositionals: true,
      options: {
        help: { type: 'boolean' },
        ...Object.fromEntries(
          Object.entries(cli.options).map(([name, flag]) => [
            name,
            flag.type === 'boolean'
              ? { type: 'boolean' as const }
              : { type: 'string' as const, multiple: flag.type === 'strings' },
          ]),
        ),
      },
    })
  } catch (error) {
    return { kind: 'error', message: (error as Error).message }
  }
  if (parsed.values.help === true) return { kind: 'help' }
  const expected = cli.positionals ?? []
  const required = expected.filter((name) => !name.startsWith('[')).length
  if (parsed.positionals.length < required || parsed.positionals.length > expected.length) {
    const given = parsed.positionals.length === 0 ? 'none' : parsed.positionals.join(' ')
    const wanted = expected.length === 0 ? 'no arguments' : expected.join(' ')
    return { kind: 'error', message: `expected ${wanted}, given ${given}` }
  }
  const values: Record<string, unknown> = {}
  for (const [name, flag] of Object.entries(cli.options)) {
    const checked = checkedValue(name, flag, parsed.values[name])
    if ('error' in checked) return { kind: 'error', message: checked.error }
    values[name] = checked.value
  }
  return { kind: 'parsed', values: values as Values<O>, positionals: parsed.positionals }
}

type Checked = { readonly value: unknown } | { readonly error: string }

function checkedValue(name: string, flag: Flag, given: unknown): Checked {
  switch (flag.type) {
    case 'boolean':
      return { value: given === true }
    case 'strings':
      return { value: given ?? [] }
    case 'number':
      return given === undefined
        ? { value: flag.default }
        : checkedNumber(name, flag, String(given))
    case 'regex':
      if (given === undefined) return { value: flag.default }
      try {
        return { value: new RegExp(String(given)) }
      } catch (error) {
        return { error: `--${name}: ${(error as Error).message}` }
      }
    case 'choice':
      if (given === undefined) return { value: flag.default }
      if (flag.choices.includes(String(given))) return { value: given }
      return { error: `--${name} must be one of ${flag.choices.join(', ')}, not '${given}'` }
    default:
      return { value: given ?? flag.default }
  }
}

function checkedNumber(
  name: string,
  flag: Extract<Flag, { type: 'number' }>,
  given: string,
): Checked {
  const value = Number(given)
  const whole = flag.integer !== true || Number.isInteger(value)
  const inRange = value > 0 || (flag.zero === true && value === 0)
  if (given.trim() !== '' && Number.isFinite(value) && whole && inRange) return { value }
  const kind = `${flag.zero ? 'non-negative' : 'positive'} ${flag.integer ? 'integer' : 'number'}`
  return { error: `--${name} must be a ${kind}, not '${given}'` }
}

/**
 * `--flags-b --no-maglev` as `--flags-b=--no-maglev`: parseArgs refuses a separate value that
 * starts with a dash (it may be a forgotten value), which is what a `flags` value is.
 */
function joinDashValues(options: Record<string, Flag>, args: readonly string[]): string[] {
  const joined: string[] = []
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string
    if (arg === '--') return [...joined, ...args.slice(i)]
    const name = arg.startsWith('--') ? arg.slice(2) : ''
    if (options[name]?.type === 'flags' && i + 1 < args.length) {
      joined.push(`${arg}=${args[++i]}`)
    } else joined.push(arg)
  }
  return joined
}

/** Stops the script as a bad command line does: the message and the usage, exit code 2. */
export function exitWithUsage<O extends Record<string, Flag>>(cli: Cli<O>, message: string): never {
  console.error(`${cli.script}: ${message}\n${usageOf(cli)}`)
  process.exit(2)
}

/** The script's command line (`process.argv` by default), or its usage and an exit. */
export function readCli<const O extends Record<string, Flag>>(
  cli: Cli<O>,
  args: readonly string[] = process.argv.slice(2),
): { values: Values<O>; positionals: string[] } {
  const parsed = parseCli(cli, args)
  if (parsed.kind === 'error') exitWithUsage(cli, parsed.message)
  if (parsed.kind === 'help') {
    console.log(usageOf(cli))
    process.exit(0)
  }
  return parsed
}
