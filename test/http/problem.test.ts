import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { describe, test } from 'node:test'
import { PROBLEMS, type ProblemCode, problem } from '../../src/http/problem.ts'

describe('problem', () => {
  test('builds an RFC 9457 body with a stable type URI and the table title', () => {
    assert.deepEqual(problem(404, 'not_found', 'No such token.', 'req-1'), {
      type: 'https://tokengate.dev/problems/not_found',
      title: 'Not found',
      status: 404,
      detail: 'No such token.',
      code: 'not_found',
      requestId: 'req-1',
    })
  })

  test('without extras the body is the six standard members in order, as serialised before', () => {
    const body = problem(401, 'invalid_token', 'The access token is invalid.', 'req-2')
    assert.deepEqual(Object.keys(body), ['type', 'title', 'status', 'detail', 'code', 'requestId'])
    assert.equal(JSON.stringify(body), JSON.stringify({ ...body, ...({} as object), ...body }))
  })

  test('extra members are added but can never replace the standard ones', () => {
    const body = problem(429, 'rate_limited', 'Slow down.', 'req-1', {
      retryAfterSeconds: 3,
      status: 200,
      code: 'ok',
      type: 'about:blank',
      requestId: 'forged',
    })
    assert.equal(body.status, 429)
    assert.equal(body.code, 'rate_limited')
    assert.equal(body.type, 'https://tokengate.dev/problems/rate_limited')
    assert.equal(body.requestId, 'req-1')
    assert.equal(body.retryAfterSeconds, 3)
    assert.deepEqual(Object.keys(body).slice(0, 6), [
      'type',
      'title',
      'status',
      'detail',
      'code',
      'requestId',
    ])
  })

  test('every code has a title and a conventional status', () => {
    for (const [code, { status, title }] of Object.entries(PROBLEMS)) {
      assert.ok(title.length > 0, code)
      assert.ok(status >= 400 && status <= 599, code)
      assert.match(code, /^[a-z]+(_[a-z]+)*$/)
    }
  })

  test('docs/errors.md documents every code with its status and type URI', () => {
    const docs = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8')
    const rows = docs
      .split('\n')
      .filter((line) => line.startsWith('|'))
      .map((line) =>
        line
          .split('|')
          .slice(1, -1)
          .map((cell) => cell.trim()),
      )
    for (const [code, { status, title }] of Object.entries(PROBLEMS) as [
      ProblemCode,
      { status: number; title: string },
    ][]) {
      const row = rows.find((cells) => cells[0] === `\`${code}\``)
      assert.ok(row, `docs/errors.md has no row for ${code}`)
      assert.equal(row[1], String(status), `${code}: status`)
      assert.equal(row[2], `\`https://tokengate.dev/problems/${code}\``, `${code}: type URI`)
      assert.equal(row[3], title, `${code}: title`)
    }
  })
})
