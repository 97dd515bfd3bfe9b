/**
 * Every code block of README.md and docs/*.md says what it is (markdown-blocks.ts) and parses:
 * shell with `bash -n`, JavaScript and TypeScript with `node --check` (types stripped first),
 * YAML and JSON with their parsers, Python with `py_compile`. The blocks that run are run by
 * the doc runner against the installed package (test/package/docs.package.ts), which also
 * type-checks every `ts`/`js` block with `file=`; one without `file=` must say why (`no-run=`).
 */
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { stripTypeScriptTypes } from 'node:module'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { parse as parseYaml } from 'yaml'
import { tempDir } from '../helpers/temp-dir.ts'
import { type Block, blocksOf, docFiles, where } from './markdown-blocks.ts'

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
