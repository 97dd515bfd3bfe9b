/**
 * The dependency rules of DESIGN.md "Shape" and STYLE.md §2, made mechanical:
 * - src/core imports only jose, a few node: built-ins and itself, and never reads process.env;
 * - src/http imports only itself, src/core and node: built-ins (no framework).
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const CORE = join(ROOT, 'src', 'core')
const HTTP = join(ROOT, 'src', 'http')
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

  test('src/core imports only jose, node:crypto/zlib/buffer/util and src/core, and never process.env', () => {
    const files = sourceFiles(CORE)
    assert.ok(files.length >= 10, `only ${files.length} files found under src/core`)
    const found = violations(CORE, (file, specifier) =>
      specifier.startsWith('.') ? isInside(file, specifier, [CORE]) : CORE_PACKAGES.has(specifier),
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
