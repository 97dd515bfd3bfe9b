import { existsSync } from 'node:fs'
import { userInfo } from 'node:os'
import { resolve } from 'node:path'
import { storeAuditSink } from '../auth/audit-events.ts'
import { type OperationDeps, OperationRefused, type RefusalCode } from '../auth/operations.ts'
import { unknownVariables } from '../config/hints.ts'
import { ENV_VARIABLES, loadConfig, SECRET_ENV_VARIABLES } from '../config/load.ts'
import type { Config } from '../config/schema.ts'
import type { Store, StoreTransaction } from '../stores/store.ts'
import { type OptionDefs, optionalString, type ParsedArgs } from './args.ts'
import { CommandFailure, UsageError } from './errors.ts'
import type { CliIo } from './io.ts'
import type { Output } from './output.ts'

/** What a command runs with: its parsed arguments, output, clock and config access. */
export interface CommandContext {
  readonly io: CliIo
  readonly out: Output
  readonly args: ParsedArgs
  /** `--json` was given: write exactly one JSON document to stdout. */
  readonly json: boolean
  now(): number
  /**
   * Loads the configuration: file + environment + global flags + `overrides` (in the
   * schema's shape). Throws ConfigError listing every problem.
   */
  config(overrides?: Record<string, unknown>): Readonly<Config>
}

/** A command: its place in the command tree, its help, its options and what it does. */
export interface CommandDef {
  /** Command words, e.g. `['pat', 'issue']`. */
  readonly path: readonly string[]
  /** One line for command lists. */
  readonly summary: string
  /** Argument synopsis after the command words, e.g. `TOKEN_ID`. */
  readonly synopsis?: string
  /** Paragraphs shown in the command's help after the usage line. */
  readonly description?: string
  readonly options: OptionDefs
  /** Number of positional arguments accepted. */
  readonly positionals?: number
  readonly examples?: readonly string[]
  /** Returns the exit code (0 when undefined). Throws UsageError / CommandFailure. */
  run(ctx: CommandContext): Promise<number | undefined>
}

/** Builds the context for one command invocation. */
export function createContext(io: CliIo, out: Output, args: ParsedArgs): CommandContext {
  let warned = false
  return {
    io,
    out,
    args,
    json: args.values.json === true,
    now: io.now ?? Date.now,
    config(overrides = {}) {
      const fromFlags: Record<string, unknown> = {}
      const dataDir = optionalString(args, 'data-dir')
      const databaseUrl = optionalString(args, 'database-url')
      if (dataDir !== undefined) fromFlags.dataDir = dataDir
      if (databaseUrl !== undefined) {
        if (!/^postgres(ql)?:\/\//.test(databaseUrl)) {
          // The value is not echoed: a database URL usually carries a password.
          throw new UsageError('--database-url: expected a postgres:// or postgresql:// URL')
        }
        fromFlags.databaseUrl = databaseUrl
      }
      if (!warned) {
        // A misspelt variable would otherwise be ignored in silence.
        warned = true
        const known = [
          ...Object.keys(ENV_VARIABLES),
          ...SECRET_ENV_VARIABLES.map((name) => `${name}_FILE`),
        ]
        for (const warning of unknownVariables(io.env, known)) {
          out.note(`tokengate: warning: ${warning}`)
        }
      }
      return loadConfig({
        file: optionalString(args, 'config'),
        env: io.env,
        // A deep copy: loadConfig fills defaults into, and freezes, objects it is handed.
        overrides: structuredClone(mergeShallow(fromFlags, overrides)),
      })
    },
  }
}

function mergeShallow(a: Record<string, unknown>, b: Record<string, unknown>) {
  const out = { ...a }
  for (const [key, value] of Object.entries(b)) {
    const prior = out[key]
    out[key] =
      prior && typeof prior === 'object' && value && typeof value === 'object'
        ? { ...prior, ...value }
        : value
  }
  return out
}

/**
 * Overrides for commands that manage the store but do not serve: the server's TLS settings
 * do not apply to them, so a config without certificates (checked by `serve`) is not an
 * error here.
 */
export const ADMIN_OVERRIDES: Readonly<Record<string, unknown>> = { server: { plainHttp: true } }

/**
 * Opens the store the configuration names (SQLite in the data directory, or Postgres),
 * applies pending migrations, runs `use` and always closes the store.
 *
 * An embedded store that does not exist yet is created only when `create` is given (the
 * commands that start a store's life: migrate, tenant create, issuer add, admin token issue,
 * policy set, apply), and then said on its stderr. Every other command run in the wrong
 * directory would otherwise answer from a new, empty store ("(none)", "no key tok_...").
 */
export async function withStore<T>(
  config: Readonly<Config>,
  use: (store: Store, applied: readonly number[]) => Promise<T>,
  create?: CliIo,
): Promise<T> {
  const { openStore, SQLITE_FILE_NAME } = await import('../stores/open-store.ts')
  const databaseFile = config.databaseUrl ? undefined : resolve(config.dataDir, SQLITE_FILE_NAME)
  const created = databaseFile !== undefined && !existsSync(databaseFile)
  if (created && !create) throw new CommandFailure(noStoreMessage(config.dataDir))
  const named = async (error: unknown) => {
    const { storeUnreachable } = await import('../startup.ts')
    throw storeUnreachable(config, error) ?? error
  }
  const store = await openStore(
    config.databaseUrl
      ? { databaseUrl: config.databaseUrl, secretKeyFile: config.secretKeyFile }
      : { dataDir: config.dataDir, secretKeyFile: config.secretKeyFile },
  ).catch(named)
  try {
    const applied = await store.migrate().catch(named)
    if (created)
      create?.stderr.write(`tokengate: created a new store in ${resolve(config.dataDir)}\n`)
    return await use(store, applied)
  } finally {
    await store.close()
  }
}

/** Where the CLI looked for the embedded store and how to point it at one. */
function noStoreMessage(dataDir: string): string {
  return (
    `no store in ${resolve(dataDir)} (no tokengate.db there; nothing was created). ` +
    'Point at the data directory with --data-dir DIR, TOKENGATE_DATA_DIR=DIR or dataDir in ' +
    "the config file (--config FILE), or at Postgres with --database-url or DATABASE_URL; 'tokengate migrate' creates a new store"
  )
}

/** `cli:<os user>`: the actor recorded on audit events for operator actions. */
export function cliActor(env: Readonly<Record<string, string | undefined>>): string {
  let name: string | undefined
  try {
    name = userInfo().username
  } catch {
    name = env.USER ?? env.USERNAME
  }
  return `cli:${name || 'unknown'}`
}

/** What application-layer operations run with from the CLI: the actor is `cli:<os user>`. */
export function operationDeps(ctx: CommandContext, store: StoreTransaction): OperationDeps {
  return {
    store,
    clock: { now: ctx.now },
    actor: { actor: cliActor(ctx.io.env) },
    audit: storeAuditSink(store, ctx.now),
  }
}

/** How the CLI words a refused operation, per refusal; unlisted ones keep the layer's message. */
export type RefusalWording = Partial<Record<RefusalCode, (refused: OperationRefused) => string>>

/** Runs an operation, turning its refusal into a CommandFailure worded for the operator. */
export async function operate<T>(run: () => Promise<T>, wording: RefusalWording = {}): Promise<T> {
  try {
    return await run()
  } catch (error) {
    if (!(error instanceof OperationRefused)) throw error
    throw new CommandFailure(wording[error.code]?.(error) ?? withoutControls(error.message))
  }
}

/** Control characters escaped, so a refused name cannot rewrite the operator's terminal. */
function withoutControls(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching them is the point
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => JSON.stringify(c).slice(1, -1))
}
