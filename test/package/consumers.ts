/**
 * The package as users get it: `npm pack` of this repository, installed from the tarball
 * into fresh consumer projects in a temporary directory (dependencies from the registry or
 * npm's cache, nothing from this repository's node_modules):
 * - `node24`: the tarball, the four frameworks, the optional peers (pg, ioredis,
 *   prom-client) and TypeScript, run on the Node running the tests (24);
 * - `node22`: the same on Node 22 (`node@22` is its own dependency, its `.bin/node`);
 * - `lean`: the tarball alone, `npm install --omit=optional`, as the README tells a
 *   library-only user to install it.
 *
 * `npm run test:package` (run.ts) prepares them once and hands the directory to every suite
 * in `TOKENGATE_PACKAGE_ROOT`; a package suite run on its own prepares them itself.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)
export const REPO = fileURLToPath(new URL('../..', import.meta.url))
const repoPackage = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8'))
export const REPO_VERSION: string = repoPackage.version
export const NODE_22 = '22.23.3'

export interface Consumers {
  readonly root: string
  readonly tarball: string
  /** What `npm pack --json` reported. */
  readonly packed: {
    readonly size: number
    readonly unpackedSize: number
    readonly entryCount: number
    readonly files: readonly { readonly path: string; readonly size: number }[]
  }
  readonly node24: string
  readonly node22: string
  readonly lean: string
}

/** npm with the Node running the tests first on PATH (for lifecycle scripts: prepack). */
export const npmEnv: NodeJS.ProcessEnv = {
  ...process.env,
  PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH}`,
  npm_config_audit: 'false',
  npm_config_fund: 'false',
  npm_config_update_notifier: 'false',
}

/** A pinned version from this repository's package.json, so consumers match CI's. */
export function pinned(name: string): string {
  const version =
    repoPackage.devDependencies?.[name] ??
    repoPackage.optionalDependencies?.[name] ??
    repoPackage.dependencies?.[name]
  assert.ok(version, `${name} is pinned in package.json`)
  return version
}

const MANIFEST = 'consumers.json'

/**
 * The consumers of `TOKENGATE_PACKAGE_ROOT` when run.ts made them, else new ones (removed
 * when this process exits).
 */
export async function consumers(): Promise<Consumers> {
  const root = process.env.TOKENGATE_PACKAGE_ROOT
  if (root && existsSync(join(root, MANIFEST))) {
    return JSON.parse(readFileSync(join(root, MANIFEST), 'utf8')) as Consumers
  }
  const made = await prepareConsumers(mkdtempSync(join(tmpdir(), 'tokengate-consumers-')))
  process.on('exit', () => rmSync(made.root, { recursive: true, force: true }))
  return made
}

/** Packs the repository and installs the three consumer projects under `root`. */
export async function prepareConsumers(root: string): Promise<Consumers> {
  const packedOut = await run('npm', ['pack', '--json', '--pack-destination', root], {
    cwd: REPO,
    env: npmEnv,
    maxBuffer: 64 * 1024 * 1024,
  })
  const [packed] = JSON.parse(
    packedOut.stdout.slice(packedOut.stdout.indexOf('[')),
  ) as (Consumers['packed'] & {
    filename: string
  })[]
  assert.ok(packed)
  const tarball = join(root, packed.filename)
  const frameworks = ['express', 'fastify', 'hono', '@hono/node-server']
  const peers = ['pg', 'ioredis', 'prom-client']
  const types = ['typescript', '@types/node', '@types/express']
  const project = async (
    name: string,
    dependencies: string[],
    extra: object,
    flags: string[] = [],
  ) => {
    const dir = join(root, name)
    mkdirSync(dir)
    writeFileSync(
      join(dir, 'package.json'),
      JSON.stringify({
        name: `tokengate-consumer-${name}`,
        private: true,
        type: 'module',
        dependencies: {
          tokengate: `file:${tarball}`,
          ...Object.fromEntries(dependencies.map((d) => [d, pinned(d)])),
        },
        ...extra,
      }),
    )
    await run('npm', ['install', '--prefer-offline', '--no-package-lock', ...flags], {
      cwd: dir,
      env: npmEnv,
      maxBuffer: 64 * 1024 * 1024,
    })
    return dir
  }
  const all = [...frameworks, ...peers, ...types]
  const [node24, node22, lean] = await Promise.all([
    project('node24', all, {}),
    project('node22', all, { devDependencies: { node: NODE_22 }, allowScripts: { node: true } }),
    project('lean', [], {}, ['--omit=optional']),
  ])
  const made: Consumers = {
    root,
    tarball,
    packed: {
      size: packed.size,
      unpackedSize: packed.unpackedSize,
      entryCount: packed.entryCount,
      files: packed.files.map(({ path, size }) => ({ path, size })),
    },
    node24: node24 as string,
    node22: node22 as string,
    lean: lean as string,
  }
  writeFileSync(join(root, MANIFEST), JSON.stringify(made))
  return made
}
