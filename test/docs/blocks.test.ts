/**
 * Every code block of README.md and docs/*.md says what it is (markdown-blocks.ts) and parses:
 * shell with `bash -n`, JavaScript and TypeScript with `node --check` (types stripped first),
 * YAML and JSON with their parsers, Python with `py_compile`. The blocks that run are run by
 * the doc runner against the installed package (test/package/docs.package.ts), which also
 * type-checks every `ts`/`js` block with `file=`; one without `file=` must say why (`no-run=`).
 */
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs'
import { stripTypeScriptTypes } from 'node:module'
import { dirname, join } from 'node:path'
import { describe, test } from 'node:test'
import { parse as parseYaml } from 'yaml'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  type Block,
  blocksOf,
  docFiles,
  ROOT,
  TYPE_STRIPPING_OPTIONS,
  where,
} from './markdown-blocks.ts'

const scratch = tempDir('tg-doc-blocks-')
const hasPython = spawnSync('python3', ['--version']).status === 0

/** Throws with the parser's message when the block does not parse; false when not checked. */
function syntaxCheck(block: Block): boolean {
  const file = (extension: string, text = block.text) => {
    const path = join(scratch, `block-${block.line}.${extension}`)
    writeFileSync(path, text)
    return path
  }
  switch (block.language) {
    case 'sh':
      execFileSync('bash', ['-n', file('sh')], { stdio: 'pipe' })
      return true
    case 'js':
      execFileSync(process.execPath, ['--check', file('mjs')], { stdio: 'pipe' })
      return true
    case 'ts':
      execFileSync(process.execPath, ['--check', file('mjs', stripTypeScriptTypes(block.text))], {
        stdio: 'pipe',
      })
      return true
    case 'json':
      JSON.parse(block.text)
      return true
    case 'yaml':
      parseYaml(block.text)
      return true
    case 'python':
      if (!hasPython) {
        if (process.env.CI === 'true') throw new Error('CI=true but python3 is not installed')
        return false
      }
      execFileSync('python3', ['-m', 'py_compile', file('py')], { stdio: 'pipe' })
      return true
    default:
      return false
  }
}

/**
 * A directory where `tokengate` is this repository (its sources, through the
 * `tokengate-source` export condition) and every other package is the repository's own:
 * each entry of node_modules linked, so a doc's files resolve as in an installed project.
 */
function sourceProject(): string {
  const dir = tempDir('tg-doc-types-')
  mkdirSync(join(dir, 'node_modules'))
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    symlinkSync(join(ROOT, 'node_modules', name), join(dir, 'node_modules', name))
  }
  symlinkSync(ROOT, join(dir, 'node_modules', 'tokengate'))
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }')
  return dir
}

/**
 * `tsc --noEmit` of a doc's `ts` and `js` file blocks against the sources, under the doc's
 * `tsconfig.json` block (or Node's type-stripping options): the quick check. The doc runner
 * (docs.package.ts) checks them against the installed package and runs them.
 */
function typeCheckAgainstSources(blocks: readonly Block[]): string {
  const files = blocks.filter((b) => b.file && (b.language === 'ts' || b.language === 'js'))
  if (files.length === 0) return ''
  const dir = sourceProject()
  let options: Record<string, unknown> = { ...TYPE_STRIPPING_OPTIONS }
  for (const block of blocks) {
    if (block.file === undefined) continue
    writeFileSync(join(dir, block.file), block.text)
    if (block.file === 'tsconfig.json') options = JSON.parse(block.text).compilerOptions
  }
  writeFileSync(
    join(dir, 'tsconfig.check.json'),
    JSON.stringify({
      compilerOptions: {
        ...options,
        noEmit: true,
        allowJs: true,
        checkJs: true,
        customConditions: ['tokengate-source'],
      },
      files: files.map((b) => b.file),
    }),
  )
  const tsc = spawnSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.check.json'], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, PATH: `${dirname(process.execPath)}:${process.env.PATH}` },
  })
  if (tsc.status === 0) return ''
  // The doc's own files only: the sources are checked under the repository's own options by
  // its `tsc`, and these options may see them differently.
  const output = `${tsc.stdout}${tsc.stderr}`
  const lines = output.split('\n')
  const own = lines.filter((line) => files.some((b) => line.startsWith(`${b.file}(`)))
  // No diagnostic in any file at all (a bad option, a crash): that is the answer.
  const anyFile = lines.some((line) => /^\S+\(\d+,\d+\): error/.test(line))
  return anyFile ? own.join('\n') : output || `tsc exited ${tsc.status}`
}

for (const doc of docFiles()) {
  describe(`code blocks of ${doc}`, () => {
    const blocks = blocksOf(doc)

    test('every block says what it is', () => {
      const problems = blocks.flatMap((b) => b.problems.map((p) => `${where(b)}: ${p}`))
      assert.deepEqual(problems, [])
    })

    test('every TypeScript and JavaScript block is run (file=NAME) or says why not (no-run=)', () => {
      // A block a user would paste must be one the doc runner type-checks and runs; a fragment
      // has to say so, so a broken example cannot hide as "only syntax-checked".
      const silent = blocks
        .filter((b) => (b.language === 'ts' || b.language === 'js') && !b.file && !b.noRun)
        .map(where)
      assert.deepEqual(silent, [])
    })

    test('its TypeScript and JavaScript files type-check against the sources', () => {
      assert.equal(typeCheckAgainstSources(blocks), '')
    })

    test('every block parses', () => {
      const failures: string[] = []
      for (const block of blocks) {
        try {
          syntaxCheck(block)
        } catch (error) {
          const { stderr, message } = error as { stderr?: Buffer; message: string }
          failures.push(`${where(block)} (${block.language}): ${stderr?.toString() || message}`)
        }
      }
      assert.deepEqual(failures, [])
    })
  })
}
