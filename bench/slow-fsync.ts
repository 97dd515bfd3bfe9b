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
  /** Add to the environment of the process that should have the slow disk. */
  readonly env: Readonly<Record<string, string>>
  /** The shim's log: one line per delayed call, "<function> <epoch ms> <fd>". */
  readonly logFile: string
  /** Delayed calls logged from `fromMs` to `toMs` (epoch ms). */
  callsBetween(fromMs: number, toMs: number): number
  cleanup(): void
}

/** Compiles the shim; throws with the compiler's message when `cc` is missing or fails. */
export function buildSlowFsync(delayMs: number): SlowFsync {
  if (!commandExists('cc')) throw new Error('--slow-fsync needs a C compiler (cc)')
  const dir = mkdtempSync(join(tmpdir(), 'tg-slow-fsync-'))
  const library = join(dir, 'slow-fsync.so')
  const logFile = join(dir, 'calls.log')
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
    env: { LD_PRELOAD: library, SLOW_FSYNC_MS: String(delayMs), SLOW_FSYNC_LOG: logFile },
    logFile,
    callsBetween(fromMs, toMs) {
      let text = ''
      try {
        text = readFileSync(logFile, 'utf8')
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
    const shim = buildSlowFsync(Number(process.argv[2] ?? 50))
    const run = (env: Record<string, string>) =>
      execFileSync(process.execPath, [import.meta.filename, '--commit-loop'], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      }).trim()
    console.log(`without the shim: ${run({})}`)
    console.log(`with the shim:    ${run(shim.env)}`)
    console.log(readFileSync(shim.logFile, 'utf8').trim())
    shim.cleanup()
  }
}
