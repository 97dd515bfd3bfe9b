import assert from 'node:assert/strict'
import { test } from 'node:test'

test("the bin drops Node 22's SQLite ExperimentalWarning and prints every other warning", async () => {
  const printed: string[] = []
  process.on('warning', (warning) => printed.push(warning.message))
  await import('../../src/stores/sqlite-warning.ts')
  process.emitWarning(
    'SQLite is an experimental feature and might change at any time',
    'ExperimentalWarning',
  )
  process.emitWarning(new Error('SQLite is an experimental feature (as an Error)'))
  process.emitWarning('something else', 'Warning')
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(printed, ['something else'])
})
