import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { CliIo } from '../../src/cli/io.ts'
import { run } from '../../src/cli/main.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { Store } from '../../src/stores/store.ts'
import { PACKAGE_PROJECT, runTokengate } from '../helpers/launch.ts'

/** What one in-process CLI invocation produced. */
export interface CliResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Captures writes as text. */
export function sink(): { write(chunk: string): boolean; text(): string } {
  let text = ''
  return {
    write(chunk: string) {
      text += chunk
      return true
    },
    text: () => text,
  }
}

/** A fresh data directory, removed by `cleanup`. */
export function tempDataDir(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'tokengate-cli-'))
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

/**
 * Runs the CLI with captured output: in-process from the sources, or the installed bin as a
 * process when a package is under test (helpers/launch.ts; `now`, `signal` and `log` are
 * in-process only). `dataDir` is appended as `--data-dir`; the environment is empty unless
 * given, so the machine's TOKENGATE_* variables never leak in.
 */
export async function cli(
  args: readonly string[],
  options: {
    dataDir?: string
    env?: CliIo['env']
    now?: () => number
    signal?: AbortSignal
    log?: CliIo['log']
  } = {},
): Promise<CliResult> {
  const argv = options.dataDir === undefined ? args : [...args, '--data-dir', options.dataDir]
  if (PACKAGE_PROJECT) {
    if (options.now || options.signal || options.log) {
      throw new Error('now, signal and log need the CLI in-process: mark the test needsSources')
    }
    return runTokengate(argv, { env: withoutUndefined(options.env ?? {}) })
  }
  const stdout = sink()
  const stderr = sink()
  const code = await run(argv, {
    stdout,
    stderr,
    env: options.env ?? {},
    now: options.now,
    signal: options.signal,
    log: options.log,
    server: () => import('../../src/main.ts'),
  })
  return { code, stdout: stdout.text(), stderr: stderr.text() }
}

function withoutUndefined(env: CliIo['env']): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter((entry): entry is [string, string] => entry[1] !== undefined),
  )
}

/** Runs the CLI and parses stdout as the one JSON document; fails on a non-zero exit. */
export async function cliJson<T = Record<string, unknown>>(
  args: readonly string[],
  options: Parameters<typeof cli>[1] = {},
): Promise<T> {
  const result = await cli([...args, '--json'], options)
  if (result.code !== 0) {
    throw new Error(`exit ${result.code}: ${result.stderr}`)
  }
  return JSON.parse(result.stdout) as T
}

/** Opens the data directory's store (migrated) for assertions, and closes it after `use`. */
export async function withDataStore<T>(
  dataDir: string,
  use: (store: Store) => Promise<T>,
): Promise<T> {
  const store = await openStore({ dataDir })
  try {
    await store.migrate()
    return await use(store)
  } finally {
    await store.close()
  }
}
