import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { CliIo } from '../../src/cli/io.ts'
import { run } from '../../src/cli/main.ts'
import { openStore } from '../../src/stores/open-store.ts'
import type { Store } from '../../src/stores/store.ts'

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
 * Runs the CLI in-process with captured output. `dataDir` is appended as `--data-dir`; the
 * environment is empty unless given, so the machine's TOKENGATE_* variables never leak in.
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
  const stdout = sink()
  const stderr = sink()
  const argv = options.dataDir === undefined ? args : [...args, '--data-dir', options.dataDir]
  const code = await run(argv, {
    stdout,
    stderr,
    env: options.env ?? {},
    now: options.now,
    signal: options.signal,
    log: options.log,
  })
  return { code, stdout: stdout.text(), stderr: stderr.text() }
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
