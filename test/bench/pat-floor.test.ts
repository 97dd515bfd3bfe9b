/** bench/pat-floor.ts: createTokengate's PAT target printed beside its floor (issue #36). */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { NAIVE_ANSWER, patFloorLines } from '../../bench/pat-floor.ts'

const row = (server: string, rps: number, repeats: number[], id = 'PAT single') => ({
  case: id,
  server,
  rps,
  repeats,
})

test('the three ratios, per repeat, from the PAT single rows only', () => {
  const lines = patFloorLines([
    row('tokengate createTokengate', 36_000, [36_000, 34_000]),
    row('fastify-naive-pat', 40_000, [40_000, 40_000]),
    row(NAIVE_ANSWER, 36_000, [36_000, 40_000]),
    row('tokengate createTokengate', 1, [1, 1], 'PAT distinct (10k)'),
  ])
  assert.deepEqual(lines, [
    '| PAT single (CPU 0) | ratio (medians) | per repeat | target |',
    '|---|---:|---|---:|',
    '| createTokengate / naive peer | 0.90 | 0.90 0.85 | 1.0 |',
    `| floor: ${NAIVE_ANSWER} / naive peer | 0.90 | 0.90 1.00 | — |`,
    '| createTokengate / floor | 1.00 | 1.00 0.85 | — |',
    '',
  ])
})

test('nothing when the run left out one of the three rows', () => {
  const both = [
    row('tokengate createTokengate', 36_000, [36_000]),
    row('fastify-naive-pat', 40_000, [40_000]),
  ]
  assert.deepEqual(patFloorLines(both), [])
  assert.deepEqual(patFloorLines([...both, row(NAIVE_ANSWER, 0, [0])]), [])
})
