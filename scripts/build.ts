/**
 * `npm run build` (and `prepack`): the package's JavaScript and declarations in dist/, from
 * a clean directory so that a deleted source never ships as a stale file; then
 * every file of src/ that is not TypeScript (the console's CSS and script), which tsc does not
 * emit but the code reads beside itself (`new URL('./assets/', import.meta.url)`).
 */
import { execFileSync } from 'node:child_process'
import { cpSync, readdirSync, rmSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const src = join(root, 'src')
const dist = join(root, 'dist')
rmSync(dist, { recursive: true, force: true })
execFileSync(
  process.execPath,
  [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')],
  { stdio: 'inherit' },
)
for (const entry of readdirSync(src, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || entry.name.endsWith('.ts')) continue
  const file = join(entry.parentPath, entry.name)
  cpSync(file, join(dist, relative(src, file)))
}
