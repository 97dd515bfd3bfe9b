/**
 * The dependency rules of DESIGN.md "Shape" and STYLE.md §2, made mechanical (README
 * "Architecture" states them in prose):
 * - src/core imports only jose, a few node: built-ins and itself, and never reads process.env;
 * - src/http imports only itself, src/core and node: built-ins (no framework);
 * - every top-level module imports only the modules its row of LAYERS allows, so the arrows
 *   point one way: server, gateway, decision, admin, adapters, cli -> auth -> core, stores, http;
 * - the HTTP front ends use stores for types only: reads and writes go through auth;
 * - no import cycle between files (static or dynamic imports);
 * - only main.ts (the composition root) builds the server and mounts the gateway;
 * - only src/config/load.ts (and the CLI entry that hands it the environment) reads process.env.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const SRC = join(ROOT, 'src')
const CORE = join(SRC, 'core')
const HTTP = join(SRC, 'http')
const LIB = join(SRC, 'lib')
const CORE_PACKAGES = new Set(['jose', 'node:crypto', 'node:zlib', 'node:buffer', 'node:util'])

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && /\.(ts|js|mts|cts|mjs|cjs)$/.test(entry.name))
    .map((entry) => join(entry.parentPath, entry.name))
}

/** Source without comments, so TSDoc examples do not count as imports. */
function stripComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '')
}

/** Every module specifier: static and type imports, re-exports, dynamic import(), require(). */
function importsOf(source: string): string[] {
  const code = stripComments(source)
  const patterns = [
    /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"`]([^'"`]+)['"`]\s*\)/g,
    /\brequire\s*\(\s*['"`]([^'"`]+)['"`]\s*\)/g,
  ]
  return patterns.flatMap((pattern) =>
    [...code.matchAll(pattern)].map((match) => match[1] as string),
  )
}

function isInside(file: string, specifier: string, dirs: readonly string[]): boolean {
  const target = resolve(dirname(file), specifier)
  return dirs.some((dir) => target === dir || target.startsWith(dir + sep))
}

function violations(dir: string, allowed: (file: string, specifier: string) => boolean): string[] {
  const found: string[] = []
  for (const file of sourceFiles(dir)) {
    const source = readFileSync(file, 'utf8')
    for (const specifier of importsOf(source)) {
      if (!allowed(file, specifier)) found.push(`${relative(ROOT, file)} imports '${specifier}'`)
    }
    if (/\bprocess\s*(\.|\[)\s*['"]?env\b/.test(stripComments(source))) {
      found.push(`${relative(ROOT, file)} reads process.env`)
    }
  }
  return found
}

describe('architecture', () => {
  test('the import scanner sees every form of import', () => {
    const sample = [
      "import { a } from 'fastify'",
      "import type { B } from '../stores/store.ts'",
      "import * as pg from 'pg'",
      "import 'node:sqlite'",
      "export { c } from './c.ts'",
      "export * from 'hono'",
      "type T = import('express').Request",
      "const m = await import('ioredis')",
      "const r = require('undici')",
      "import {\n  d,\n  e,\n} from 'multi-line'",
      '/** import { x } from "in-a-comment" */',
      "// import y from 'line-comment'",
    ].join('\n')
    assert.deepEqual(importsOf(sample).sort(), [
      '../stores/store.ts',
      './c.ts',
      'express',
      'fastify',
      'hono',
      'ioredis',
      'multi-line',
      'node:sqlite',
      'pg',
      'undici',
    ])
  })

  test('src/core imports only jose, node:crypto/zlib/buffer/util, src/core and src/lib, and never process.env', () => {
    const files = sourceFiles(CORE)
    assert.ok(files.length >= 10, `only ${files.length} files found under src/core`)
    const found = violations(CORE, (file, specifier) =>
      specifier.startsWith('.')
        ? isInside(file, specifier, [CORE, LIB])
        : CORE_PACKAGES.has(specifier),
    )
    assert.deepEqual(found, [])
  })

  test('src/http imports only src/http, src/core and node: built-ins', () => {
    assert.ok(sourceFiles(HTTP).length >= 4)
    const found = violations(HTTP, (file, specifier) =>
      specifier.startsWith('.')
        ? isInside(file, specifier, [HTTP, CORE])
        : specifier.startsWith('node:'),
    )
    assert.deepEqual(found, [])
  })
})

/**
 * What each top-level module of src/ may import of ours (besides itself). `stores:types`
 * allows `import type` from src/stores only. main.ts and index.ts (the composition root and
 * the package entry) may import anything.
 */
const LAYERS: Readonly<Record<string, readonly string[]>> = {
  // Generic data structures and sync-or-async helpers: no auth rules, nothing of ours.
  lib: [],
  core: ['lib'],
  http: ['core'],
  stores: ['core', 'lib'],
  // Lists in the configuration are checked at load with the rules that use them.
  config: ['core', 'http'],
  events: ['core', 'stores', 'config'],
  auth: ['core', 'lib', 'stores', 'http', 'events', 'config', 'missing-package.ts'],
  // CAEP/SSF (issue #34): the receiver makes rules through auth's operations; the
  // transmitter sends through the event outbox. main.ts mounts both.
  ssf: ['auth', 'core', 'lib', 'stores', 'http', 'events', 'config'],
  // The server registers the edge's Fastify hooks (auth/edge-fastify.ts), as the public
  // Fastify binding does: it never imports the binding.
  server: ['auth', 'core', 'http', 'lib', 'config', 'stores:types', 'logger.ts'],
  // Gets the built-in route names from main.ts; never reads the server nor a library
  // binding: its refusals go on the wire from http/ (sendProblemResponse).
  gateway: ['auth', 'core', 'lib', 'http', 'config'],
  // Reads the forwarded request, asks the gate, answers: no other front end.
  decision: ['auth', 'core', 'lib', 'http', 'config'],
  // Its own gate (admin-gate.ts) over the admin credential kinds; no library binding.
  admin: ['auth', 'core', 'http', 'config', 'stores:types'],
  // Thin bindings of the gate (auth/gate.ts) for each framework.
  adapters: ['auth', 'core', 'lib', 'http'],
  // `admin openapi` prints the admin API's document (one file), as `openapi` prints the
  // server's. Never main.ts: the process entry (entry.ts) hands `serve` the server.
  cli: [
    'auth',
    'core',
    'stores',
    'config',
    'dev',
    'events',
    'server',
    'gateway',
    'admin/openapi.ts',
    'logger.ts',
    'missing-package.ts',
    // Where the store was looked for, in an error naming it (storeUnreachable).
    'startup.ts',
    // `serve` gives memory back when idle, and bounds its old space's growth under load.
    'lib/serving-process.ts',
  ],
  dev: ['core', 'lib', 'stores', 'config'],
  'logger.ts': [],
  'missing-package.ts': [],
  'startup.ts': ['config', 'stores', 'auth/redis-client.ts'],
  // Process entries: the CLI with the server it may start; a worker of `server.workers`.
  'entry.ts': ['cli', 'main.ts'],
  // Silences node:sqlite's experimental warning first, as the bin does for the primary.
  'serve-worker.ts': ['stores/sqlite-warning.ts', 'main.ts', 'server', 'lib/serving-process.ts'],
}

/**
 * Static imports without `import type` / `export type` (those vanish at run time), side-effect
 * imports included.
 */
function valueImportsOf(source: string): string[] {
  const code = stripComments(source)
  return [
    ...code.matchAll(/\b(?:import|export)\s+(?!type\b)[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g),
    ...code.matchAll(/\bimport\s*['"]([^'"]+)['"]/g),
    ...code.matchAll(/\bimport\s*\(\s*['"`]([^'"`]+)['"`]\s*\)/g),
  ].map((match) => match[1] as string)
}

/** `server/plugin.ts` -> `server`, `main.ts` -> `main.ts`. */
function moduleOf(relativeToSrc: string): string {
  const [first, ...rest] = relativeToSrc.split(sep)
  return rest.length === 0 ? (first as string) : (first as string)
}

/** Every import of ours in src/, resolved: [importer, imported, type-only], relative to src/. */
function ownImports(): { from: string; to: string; typeOnly: boolean }[] {
  const edges: { from: string; to: string; typeOnly: boolean }[] = []
  for (const file of sourceFiles(SRC)) {
    const source = readFileSync(file, 'utf8')
    const values = new Set(valueImportsOf(source))
    for (const specifier of new Set(importsOf(source))) {
      if (!specifier.startsWith('.')) continue
      edges.push({
        from: relative(SRC, file),
        to: relative(SRC, resolve(dirname(file), specifier)),
        typeOnly: !values.has(specifier),
      })
    }
  }
  return edges
}

function layeringViolations(edges: ReturnType<typeof ownImports>): string[] {
  const found: string[] = []
  for (const { from, to, typeOnly } of edges) {
    const source = moduleOf(from)
    const target = moduleOf(to)
    if (source === target || source === 'main.ts' || source === 'index.ts') continue
    const allowed = LAYERS[source]
    if (!allowed) {
      found.push(`${from}: src/${source} has no row in LAYERS`)
      continue
    }
    const ok = allowed.some(
      (rule) =>
        rule === target ||
        rule === to.split(sep).join('/') ||
        (rule === `${target}:types` && typeOnly),
    )
    if (!ok) found.push(`${from} imports ${to}${typeOnly ? ' (types)' : ''}`)
  }
  return found.sort()
}

/** Whether a source imports the functions that build the server or mount the gateway. */
function wiresListeners(source: string): boolean {
  return /\{[^}]*\b(buildServer|registerGateway)\b[^}]*\}\s*(from|=\s*await\s+import)|\)\.(buildServer|registerGateway)\b/.test(
    stripComments(source),
  )
}

/** Each import cycle between files, as the files in order (Tarjan's strongly connected sets). */
function fileCycles(edges: ReturnType<typeof ownImports>): string[][] {
  const next = new Map<string, string[]>()
  for (const { from, to } of edges) next.set(from, [...(next.get(from) ?? []), to])
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const cycles: string[][] = []
  let counter = 0
  const visit = (node: string): void => {
    index.set(node, counter)
    low.set(node, counter++)
    stack.push(node)
    onStack.add(node)
    for (const target of next.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target)
        low.set(node, Math.min(low.get(node) as number, low.get(target) as number))
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node) as number, index.get(target) as number))
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = []
      let member: string
      do {
        member = stack.pop() as string
        onStack.delete(member)
        component.push(member)
      } while (member !== node)
      if (component.length > 1) cycles.push(component.sort())
    }
  }
  for (const node of next.keys()) if (!index.has(node)) visit(node)
  return cycles
}

describe('architecture: the layering of DESIGN.md "Shape"', () => {
  const edges = ownImports()

  test('the rules see the tree: hundreds of imports, and every module of src/ has a row', () => {
    assert.ok(edges.length > 200, `only ${edges.length} imports found`)
    const modules = new Set(edges.map((e) => moduleOf(e.from)))
    for (const module of modules) {
      if (module === 'main.ts' || module === 'index.ts') continue
      assert.ok(LAYERS[module], `src/${module} has no row in LAYERS`)
    }
  })

  test('the checker catches what it must: a forbidden arrow, a value import of a store, a cycle', () => {
    const bad = [
      { from: join('core', 'a.ts'), to: join('auth', 'b.ts'), typeOnly: true },
      { from: join('server', 'a.ts'), to: join('stores', 'sqlite.ts'), typeOnly: false },
      { from: join('server', 'a.ts'), to: join('stores', 'store.ts'), typeOnly: true },
      { from: join('gateway', 'a.ts'), to: join('server', 'plugin.ts'), typeOnly: false },
    ]
    assert.deepEqual(layeringViolations(bad), [
      `${join('core', 'a.ts')} imports ${join('auth', 'b.ts')} (types)`,
      `${join('gateway', 'a.ts')} imports ${join('server', 'plugin.ts')}`,
      `${join('server', 'a.ts')} imports ${join('stores', 'sqlite.ts')}`,
    ])
    const loop = [
      { from: 'a.ts', to: 'b.ts', typeOnly: false },
      { from: 'b.ts', to: 'c.ts', typeOnly: false },
      { from: 'c.ts', to: 'a.ts', typeOnly: true },
      { from: 'c.ts', to: 'd.ts', typeOnly: false },
    ]
    assert.deepEqual(fileCycles(loop), [['a.ts', 'b.ts', 'c.ts']])
  })

  test('every import follows the arrows of LAYERS', () => {
    assert.deepEqual(layeringViolations(edges), [])
  })

  test('no front end imports another front end or a library binding (adapters/)', () => {
    // ssf: its receiver answers pushed SETs on the API listener (POST /ssf/events/<name>).
    const frontEnds = new Set(['server', 'gateway', 'decision', 'admin', 'adapters', 'ssf'])
    const crossing = edges
      .filter((e) => frontEnds.has(moduleOf(e.from)) && frontEnds.has(moduleOf(e.to)))
      .filter((e) => moduleOf(e.from) !== moduleOf(e.to))
      .map((e) => `${e.from} imports ${e.to}`)
    assert.deepEqual(crossing, [])
    for (const [from, targets] of Object.entries(LAYERS)) {
      if (!frontEnds.has(from)) continue
      const named = targets.map((to) => to.split(/[/:]/)[0] as string)
      assert.deepEqual(
        named.filter((to) => frontEnds.has(to)),
        [],
        `LAYERS lets ${from} import a front end`,
      )
    }
  })

  test('the rule table itself has no cycle between modules', () => {
    const moduleEdges = Object.entries(LAYERS).flatMap(([from, targets]) =>
      targets.map((to) => ({ from, to: to.split(/[/:]/)[0] as string, typeOnly: false })),
    )
    assert.deepEqual(fileCycles(moduleEdges), [])
  })

  test('no import cycle between files, dynamic imports included', () => {
    assert.deepEqual(fileCycles(edges), [])
  })

  test('only main.ts builds the server and mounts the gateway', () => {
    for (const sample of [
      "import { buildServer } from './server/server.ts'",
      "const { registerGateway } = await import('../gateway/register.ts')",
      "(await import('./gateway/register.ts')).registerGateway(app, {})",
    ]) {
      assert.ok(wiresListeners(sample), sample)
    }
    assert.equal(wiresListeners("import { logRequest } from '../server/server.ts'"), false)
    const wiring = sourceFiles(SRC)
      .filter((file) => relative(SRC, file) !== 'main.ts')
      .filter((file) => wiresListeners(readFileSync(file, 'utf8')))
      .map((file) => relative(SRC, file))
    assert.deepEqual(wiring, [])
  })

  test('only src/config/load.ts (and the CLI entry that hands it the environment) reads process.env', () => {
    const readers = sourceFiles(SRC)
      .filter((file) =>
        /\bprocess\s*(\.|\[)\s*['"]?env\b/.test(stripComments(readFileSync(file, 'utf8'))),
      )
      .map((file) => relative(SRC, file).split(sep).join('/'))
    assert.deepEqual(readers.sort(), ['config/load.ts', 'entry.ts'])
  })
})
