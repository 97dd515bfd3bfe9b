/**
 * Builds the slow-disk shim (bench/slow-fsync.c) with the machine's `cc` into a temp dir and
 * gives the environment that applies it to one process. Never committed as a binary.
 *
 * Standalone check: `node bench/slow-fsync.ts [ms]` builds it and runs a SQLite commit loop
 * under it, printing the time per commit and the shim's own count of delayed calls.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { commandExists } from './load.ts'

export interface SlowFsync {
  /**
   * The environment that gives one process the shim: each sync delayed by `delayMs` (0: only
   * counted) and logged under `name`.
   */
  env(delayMs: number, name: string): Record<string, string>
  /** The log's path for `name`: one line per call, "<function> <epoch ms> <fd>". */
  logFile(name: string): string
  /** Calls logged under `name` from `fromMs` to `toMs` (epoch ms). */
  callsBetween(name: string, fromMs: number, toMs: number): number
  cleanup(): void
}

/** Compiles the shim; throws with the compiler's message when `cc` is missing or fails. */
export function buildSlowFsync(): SlowFsync {
  if (!commandExists('cc')) throw new Error('--slow-fsync needs a C compiler (cc)')
  const dir = mkdtempSync(join(tmpdir(), 'tg-slow-fsync-'))
  const library = join(dir, 'slow-fsync.so')
  const logFile = (name: string) => join(dir, `${name.replace(/[^\w-]/g, '_')}.log`)
  execFileSync('cc', [
    '-shared',
    '-fPIC',
    '-O2',
    '-o',
    library,
    join(import.meta.dirname, 'slow-fsync.c'),
    '-ldl',
  ])
  return {
    env: (delayMs, name) => ({
      LD_PRELOAD: library,
      SLOW_FSYNC_MS: String(delayMs),
      SLOW_FSYNC_LOG: logFile(name),
    }),
    logFile,
    callsBetween(name, fromMs, toMs) {
      let text = ''
      try {
        text = readFileSync(logFile(name), 'utf8')
      } catch {
        return 0
      }
      return text
        .split('\n')
        .map((line) => Number(line.split(' ')[1]))
        .filter((at) => at >= fromMs && at <= toMs).length
    },
    cleanup: () => rmSync(dir, { recursive: true, force: true }),
  }
}

/** Child role of the standalone check: SQLite commits, timed. */
async function commitLoop(): Promise<void> {
  const { DatabaseSync } = await import('node:sqlite')
  const dir = mkdtempSync(join(tmpdir(), 'tg-slow-fsync-db-'))
  const db = new DatabaseSync(join(dir, 'check.db'))
  db.exec('PRAGMA journal_mode = WAL')
  db.exec('PRAGMA synchronous = FULL')
  db.exec('CREATE TABLE t (v INTEGER)')
  const insert = db.prepare('INSERT INTO t VALUES (?)')
  const started = performance.now()
  for (let i = 0; i < 5; i++) insert.run(i)
  console.log(`5 commits: ${((performance.now() - started) / 5).toFixed(1)} ms per commit`)
  db.close()
  rmSync(dir, { recursive: true, force: true })
}

if (import.meta.main) {
  if (process.argv[2] === '--commit-loop') await commitLoop()
  else {
    const shim = buildSlowFsync()
    const run = (env: Record<string, string>) =>
      execFileSync(process.execPath, [import.meta.filename, '--commit-loop'], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }).trim()
    console.log(`without the shim: ${run({})}`)
    console.log(`with the shim:    ${run(shim.env(Number(process.argv[2] ?? 50), 'check'))}`)
    console.log(readFileSync(shim.logFile('check'), 'utf8').trim())
    shim.cleanup()
  }
}
