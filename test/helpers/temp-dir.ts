import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const created: string[] = []

// Removed when the test file's process exits (node --test runs each file in its own process),
// whether or not the test that made it closed what it opened: runs no longer leave their
// stores and TLS material in /tmp.
process.on('exit', () => {
  for (const dir of created) rmSync(dir, { recursive: true, force: true })
})

/** A fresh directory under the OS temp dir, removed when this test process exits. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  created.push(dir)
  return dir
}
