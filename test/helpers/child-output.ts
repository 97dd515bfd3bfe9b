/** What a test's child process has written so far, read as UTF-8 text. */
import type { ChildProcess } from 'node:child_process'

export interface ChildOutput {
  stdout(): string
  stderr(): string
}

/** Collects `child`'s stdout and stderr (pipes) from now on. */
export function collectOutput(child: ChildProcess): ChildOutput {
  let stdout = ''
  let stderr = ''
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk
  })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk
  })
  return { stdout: () => stdout, stderr: () => stderr }
}
