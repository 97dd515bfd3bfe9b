import { readFileSync } from 'node:fs'
import { ConfigError } from '../config/load.ts'
import { missingPackageError } from '../missing-package.ts'
import { ConflictError } from '../stores/store.ts'
import { parseCommandArgs, takeCommandWords } from './args.ts'
import { type CommandDef, createContext } from './context.ts'
import { CommandFailure, UsageError } from './errors.ts'
import { commandHelp, GROUPS, groupHelp, mainHelp } from './help.ts'
import type { CliIo } from './io.ts'
import { createOutput } from './output.ts'

export type { CliIo } from './io.ts'

/**
 * The module of each first command word, in the order help lists them. Only the module of
 * the command being run is loaded (all of them for the main help or an unknown word): the
 * server's start-up does not pay for the other commands' code.
 */
const COMMAND_MODULES: Readonly<Record<string, () => Promise<readonly CommandDef[]>>> = {
  serve: async () => (await import('./commands/serve.ts')).serveCommands,
  migrate: async () => (await import('./commands/migrate.ts')).migrateCommands,
  tenant: async () => (await import('./commands/tenant.ts')).tenantCommands,
  pat: async () => (await import('./commands/pat.ts')).patCommands,
  issuer: async () => (await import('./commands/issuer.ts')).issuerCommands,
  jwt: async () => (await import('./commands/jwt.ts')).jwtCommands,
  openapi: async () => (await import('./commands/openapi.ts')).openapiCommands,
  apply: async () => (await import('./commands/apply.ts')).applyCommands,
  policy: async () => (await import('./commands/policy.ts')).policyCommands,
  export: async () => (await import('./commands/export.ts')).exportCommands,
  admin: async () => (await import('./commands/admin.ts')).adminCommands,
}

/**
 * The commands `argv` may name: those of its first command word, else every command. A
 * module whose package is not installed (`npm install --omit=optional` leaves out yaml,
 * Fastify, ...) stands as one command that says so: help and `--version` still work.
 */
async function loadCommands(argv: readonly string[]): Promise<readonly CommandDef[]> {
  const [first] = takeCommandWords(
    argv,
    (words, candidate) => words.length === 0 && Object.hasOwn(COMMAND_MODULES, candidate),
  ).words
  const loaders = Object.entries(COMMAND_MODULES).filter(
    ([word]) => first === undefined || word === first,
  )
  const loaded = await Promise.all(
    loaders.map(([word, load]) =>
      load().catch((error: unknown) => {
        const missing = missingPackageError(error)
        if (!missing) throw error
        return [unavailableCommand(word, missing)]
      }),
    ),
  )
  return loaded.flat()
}

/** Stands for a command module that cannot load: running it reports what to install. */
function unavailableCommand(word: string, missing: Error): CommandDef & { unavailable: Error } {
  return {
    path: [word],
    summary: `(unavailable: ${/'([^']+)' is missing|package '([^']+)'/.exec(missing.message)?.slice(1).find(Boolean) ?? 'a package'} is not installed)`,
    options: {},
    unavailable: missing,
    run: () => Promise.reject(missing),
  }
}

/** The package version, for `--version`. */
export function cliVersion(): string {
  const text = readFileSync(new URL('../../package.json', import.meta.url), 'utf8')
  return (JSON.parse(text) as { version: string }).version
}

function isCommandWord(
  commands: readonly CommandDef[],
  words: readonly string[],
  candidate: string,
): boolean {
  if (words[0] === 'help') return words.length < 3
  if (words.length === 0) {
    return candidate === 'help' || candidate in GROUPS || Object.hasOwn(COMMAND_MODULES, candidate)
  }
  // Any depth: `admin token issue` continues `admin token`.
  return (
    (words[0] as string) in GROUPS &&
    commands.some(
      (c) =>
        c.path.length > words.length &&
        words.every((word, i) => c.path[i] === word) &&
        c.path[words.length] === candidate,
    )
  )
}

function findCommand(
  commands: readonly CommandDef[],
  words: readonly string[],
): CommandDef | undefined {
  return commands.find(
    (c) => c.path.length === words.length && c.path.every((word, i) => word === words[i]),
  )
}

/**
 * Runs the CLI with `argv` (without node and script) and returns the exit code: 0 ok,
 * 1 operation failed (not found, conflict, invalid config, store unreachable), 2 usage error.
 * Expected errors print one message to stderr, never a stack trace.
 *
 * @example
 * const code = await run(['tenant', 'list', '--json'], { stdout, stderr, env: process.env })
 */
export async function run(argv: readonly string[], io: CliIo): Promise<number> {
  const out = createOutput(io)
  const commands = await loadCommands(argv)
  const { words, rest, refused } = takeCommandWords(argv, (w, c) => isCommandWord(commands, w, c))
  const wantsHelp = rest.includes('--help') || rest.includes('-h')
  try {
    if (words[0] === 'help') return showHelp(commands, words.slice(1), io)
    if (words.length === 0) {
      if (rest.includes('--version')) {
        io.stdout.write(`${cliVersion()}\n`)
        return 0
      }
      if (wantsHelp) return showHelp(commands, [], io)
      if (refused !== undefined) throw new UsageError(`unknown command '${refused}'`)
      if (rest.length > 0) {
        parseCommandArgs(rest, {}, 0) // names an unknown option, if there is one
        throw new UsageError('missing command (e.g. serve, tenant list)')
      }
      io.stderr.write(mainHelp(commands, cliVersion()))
      return 2
    }
    const unavailable = commands.find(
      (c): c is CommandDef & { unavailable: Error } => 'unavailable' in c && c.path[0] === words[0],
    )
    if (unavailable) throw unavailable.unavailable
    const command = findCommand(commands, words)
    if (!command) {
      const group = words[0] as string
      if (wantsHelp) return showHelp(commands, [group], io)
      const next = refused
      const names = [...new Set(commands.filter((c) => c.path[0] === group).map((c) => c.path[1]))]
      throw new UsageError(
        next === undefined
          ? `missing ${group} command (expected one of: ${names.join(', ')})`
          : `unknown ${group} command '${next}' (expected one of: ${names.join(', ')})`,
      )
    }
    if (wantsHelp) return showHelp(commands, words, io)
    const args = parseCommandArgs(rest, command.options, command.positionals ?? 0)
    return (await command.run(createContext(io, out, args))) ?? 0
  } catch (error) {
    const code = report(commands, error, words, io)
    // With --json, a failure is a JSON document on stdout too (the message also went to stderr).
    if (argv.includes('--json')) io.stdout.write(`${JSON.stringify(jsonError(error, code))}\n`)
    return code
  }
}

/** The global and `serve` flags that set a setting, to name them in an error. */
const FLAGS: Readonly<Record<string, string>> = {
  '/dataDir': '--data-dir',
  '/databaseUrl': '--database-url',
  '/server/host': '--listen',
  '/server/port': '--listen',
  '/gateway/upstream': '--upstream',
  '/gateway/policyFile': '--policy',
}

/** A configuration error's problems, naming the flag of each value given as one. */
function withFlags(error: ConfigError): readonly string[] {
  if (!error.fromOverrides) return error.problems
  return error.problems.map((problem) => {
    const flag = FLAGS[problem.slice(0, problem.indexOf(':'))]
    return flag ? `${problem} (the flag ${flag}; fix its value)` : problem
  })
}

function jsonError(error: unknown, exitCode: number): object {
  const err = error instanceof Error ? error : new Error(String(error))
  const kind =
    error instanceof UsageError
      ? 'usage'
      : error instanceof ConfigError
        ? 'configuration'
        : error instanceof CommandFailure || error instanceof ConflictError
          ? 'failed'
          : 'error'
  const message = missingPackageError(error)?.message ?? err.message
  return {
    error: {
      kind,
      message: error instanceof ConfigError ? 'invalid configuration' : message,
      ...(error instanceof ConfigError ? { problems: withFlags(error) } : {}),
      exitCode,
    },
  }
}

function showHelp(commands: readonly CommandDef[], words: readonly string[], io: CliIo): number {
  if (words.length === 0) {
    io.stdout.write(mainHelp(commands, cliVersion()))
    return 0
  }
  const command = findCommand(commands, words)
  if (command) io.stdout.write(commandHelp(command))
  else if (words.length === 1 && (words[0] as string) in GROUPS) {
    io.stdout.write(groupHelp(words[0] as string, commands))
  } else throw new UsageError(`no help for unknown command '${words.join(' ')}'`)
  return 0
}

function report(
  commands: readonly CommandDef[],
  error: unknown,
  words: readonly string[],
  io: CliIo,
): number {
  const name = words.filter((w) => w !== 'help').join(' ')
  if (error instanceof UsageError) {
    const helpCommand =
      name && findCommand(commands, words) ? `tokengate ${name} --help` : 'tokengate --help'
    io.stderr.write(`tokengate: ${error.message}\nRun '${helpCommand}' for usage.\n`)
    return 2
  }
  if (error instanceof ConfigError) {
    io.stderr.write(
      `tokengate: invalid configuration:\n${withFlags(error)
        .map((p) => `  - ${p}`)
        .join('\n')}\n`,
    )
    // A bad flag value is a usage error like any other bad value given on the command line.
    return error.fromOverrides ? 2 : 1
  }
  const missing = missingPackageError(error)
  if (missing) {
    io.stderr.write(`tokengate: ${name || 'command'} failed: ${missing.message}\n`)
    return 1
  }
  if (error instanceof CommandFailure || error instanceof ConflictError) {
    io.stderr.write(`tokengate: ${error.message}\n`)
    return 1
  }
  // Unexpected: an unreachable store, a full disk, or a bug. A TypeError or ReferenceError
  // is a bug, and its stack is what a bug report needs; everything else gets one line.
  const err = error instanceof Error ? error : new Error(String(error))
  const bug = err instanceof TypeError || err instanceof ReferenceError
  io.stderr.write(`tokengate: ${name || 'command'} failed: ${bug ? err.stack : err.message}\n`)
  return 1
}
