/**
 * What the full-disk test and the disk chaos run share: a real CLI process on a data
 * directory, filling a file system up to ENOSPC, and reading /readyz.
 */
import { execFile } from 'node:child_process'
import { closeSync, openSync, writeSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const ROOT = fileURLToPath(new URL('../..', import.meta.url))

/** A real `tokengate` CLI process on `dataDir`. */
export function tokengateCli(dataDir: string, ...args: string[]) {
  return new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      ['src/entry.ts', ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH, TOKENGATE_DATA_DIR: dataDir } },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    )
  })
}

/** Writes zeros to `file` until the file system is full. */
export function fillFileSystem(file: string): void {
  const fd = openSync(file, 'w')
  try {
    for (const size of [1024 * 1024, 4096, 512]) {
      const chunk = Buffer.alloc(size)
      try {
        for (;;) writeSync(fd, chunk)
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error
      }
    }
  } finally {
    closeSync(fd)
  }
}

/** The server's /readyz answer (also when it is a 503). */
export async function readyz(url: string) {
  const res = await fetch(`${url}/readyz`)
  return (await res.json()) as { status: string; checks: Record<string, unknown> }
}
