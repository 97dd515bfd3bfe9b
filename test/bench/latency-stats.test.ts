/**
 * bench/latency-stats.ts is the one median and percentile every bench prints (issue #36):
 * these pin their definitions, so a bench's printed medians do not move with a local copy.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { median, percentile } from '../../bench/latency-stats.ts'

test('the median of an even count is the mean of the two middle values', () => {
  assert.equal(median([4, 1, 3, 2]), 2.5)
  assert.equal(median([10, 20]), 15)
})

test('the median of an odd count is the middle value, whatever the order', () => {
  assert.equal(median([3, 1, 2]), 2)
  assert.equal(median([5]), 5)
})

test('the median leaves out NaN (a round without its pair) and is NaN when nothing is left', () => {
  assert.equal(median([Number.NaN, 3, 1, 2]), 2)
  assert.ok(Number.isNaN(median([])))
  assert.ok(Number.isNaN(median([Number.NaN])))
})

test('percentiles take a sorted number[] as well as a Float64Array (nearest rank)', () => {
  const sorted = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  assert.equal(percentile(sorted, 10), 1)
  assert.equal(percentile(sorted, 25), 3)
  assert.equal(percentile(sorted, 90), 9)
  assert.equal(percentile(sorted, 100), 10)
})
