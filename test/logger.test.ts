import assert from 'node:assert/strict'
import { Writable } from 'node:stream'
import { test } from 'node:test'
import { createLogger } from '../src/logger.ts'

function capture(): {
  logger: ReturnType<typeof createLogger>
  lines: () => Record<string, unknown>[]
} {
  const out: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, done) {
      out.push(...String(chunk).split('\n').filter(Boolean))
      done()
    },
  })
  return { logger: createLogger('info', sink), lines: () => out.map((line) => JSON.parse(line)) }
}

test('a warning names its error by type, message and code, without a stack trace', () => {
  const { logger, lines } = capture()
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), {
    code: 'ECONNREFUSED',
  })
  logger.warn({ err: refused, redisStatus: 'reconnecting' }, 'Redis unavailable')
  logger.warn(new AggregateError([new Error('connect ECONNREFUSED ::1:5432')], ''), 'no store')
  const [first, second] = lines()
  assert.deepEqual(first?.error, {
    type: 'Error',
    message: 'connect ECONNREFUSED 127.0.0.1:6379',
    code: 'ECONNREFUSED',
  })
  assert.equal(first?.redisStatus, 'reconnecting')
  assert.equal(first?.err, undefined)
  assert.deepEqual(second?.error, {
    type: 'AggregateError',
    message: 'connect ECONNREFUSED ::1:5432',
  })
})

test('an error keeps its stack: it is a bug to report', () => {
  const { logger, lines } = capture()
  logger.error({ err: new TypeError('x is not a function') }, 'request failed')
  const [line] = lines()
  assert.match(
    String((line?.err as { stack?: string } | undefined)?.stack),
    /TypeError: x is not a function\n\s+at /,
  )
})
