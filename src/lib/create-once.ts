import { randomBytes } from 'node:crypto'
import {
  linkSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs'
import { dirname, join } from 'node:path'

/**
 * Creates the file `path` with `content` unless one is there, and returns what `path` holds
 * afterwards: `content`, or the file another process created first. Atomic: the content is
 * written to a temporary file and hard-linked into place (link never replaces), so a reader
 * never sees half a file and of several processes creating it at once exactly one wins and
 * the others read the winner's (`serve --dev` started twice on one fresh data directory used
 * to die with EEXIST, or read an empty file).
 */
export function createFileOnce(path: string, content: string, mode: number): string {
  const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`
  writeFileSync(temp, content, { mode, flag: 'wx' })
  try {
    linkSync(temp, path)
    return content
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
    return readFileSync(path, 'utf8')
  } finally {
    unlinkSync(temp)
  }
}

/**
 * Creates the directory `path` holding `files` (name -> content, each with its mode) unless it
 * exists, and returns the contents of those files in `path` afterwards. The files are written
 * into a temporary directory renamed into place, so files that belong together (a certificate
 * and its key) always come from the same process: a rename onto a directory that is not empty
 * fails, and the loser reads the winner's.
 */
export function createDirectoryOnce(
  path: string,
  files: Readonly<Record<string, { readonly content: string; readonly mode: number }>>,
  mode: number,
): Record<string, string> {
  mkdirSync(dirname(path), { recursive: true, mode })
  const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`
  mkdirSync(temp, { mode })
  try {
    for (const [name, file] of Object.entries(files)) {
      writeFileSync(join(temp, name), file.content, { mode: file.mode, flag: 'wx' })
    }
    renameSync(temp, path)
  } catch (error) {
    rmSync(temp, { recursive: true, force: true })
    const code = (error as NodeJS.ErrnoException).code
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error
  }
  return Object.fromEntries(
    Object.keys(files).map((name) => [name, readFileSync(join(path, name), 'utf8')]),
  )
}
