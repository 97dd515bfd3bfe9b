/**
 * The console's cookies in an ask, decided without a wire (decide.ts `headerShape`): every
 * Cookie field counts, a name that only lower-cases to `cookie` does not, and Envoy's rewrite
 * joins the fields it keeps. The gate is a stub that allows: only the shape is under test.
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { type Answer, createDecider } from '../../src/decision/decide.ts'
import { PROXY_RULES, type ProxyKind } from '../../src/decision/proxy-kinds.ts'
import { corsSettings } from '../../src/http/cors.ts'

const SESSION = '__Host-tokengate-admin=s1'
const KELVIN = '\u212a'
const allowed = {
  allowed: true,
  principal: { tokenType: 'pat', limits: undefined, expiresAt: null },
  headers: {},
  identity: { 'x-auth-tenant': 'acme' },
}
const decide = createDecider({
  gate: { check: () => allowed } as never,
  policy: {} as never,
  cors: corsSettings({ origins: [], maxAgeSec: 60 }),
})

function answer(kind: ProxyKind, cookies: readonly (readonly [string, string])[]): Answer {
  const family = PROXY_RULES[kind].family
  const stated = family ? [family.uri, '/api/v1/projects/p1', family.method, 'GET'] : []
  const decided = decide({
    kind,
    requestLine: { method: 'GET', url: kind === 'envoy' ? '/api/v1/projects/p1' : '/_tokengate' },
    pathPrefix: '',
    rawHeaders: [...stated, 'Authorization', 'Bearer x', ...cookies.flat()],
    clientAddress: '127.0.0.1',
    requestId: 'r1',
    host: 'tokengate',
  })
  return decided.answer as Answer
}

const detail = (a: Answer) => (a.type === 'refuse' ? a.response.body.detail : a.type)

describe('decision: the console cookies across Cookie fields', () => {
  test('nginx: one session cookie passes, one in each of two fields is "twice"', () => {
    assert.equal(answer('nginx', [['Cookie', `a=1; ${SESSION}`]]).type, 'allow')
    assert.equal(answer('nginx', [['Cookie', 'a=1']]).type, 'allow')
    assert.match(
      detail(
        answer('nginx', [
          ['Cookie', SESSION],
          ['cookie', `b=2; ${SESSION}`],
        ]),
      ),
      /session cookie twice/,
    )
  })

  test('a field named with the Kelvin sign is no Cookie field', () => {
    const kelvin = answer('nginx', [
      ['Cookie', SESSION],
      [`coo${KELVIN}ie`, SESSION],
    ])
    assert.equal(kelvin.type, 'allow')
  })

  test('caddy: a session cookie in the second field is refused', () => {
    assert.match(
      detail(
        answer('caddy', [
          ['Cookie', 'a=1'],
          ['COOKIE', SESSION],
        ]),
      ),
      /session cookie, which this proxy would pass/,
    )
  })

  test('envoy: the fields are joined without the console cookies, or removed', () => {
    const kept = answer('envoy', [
      ['Cookie', `a=1; ${SESSION}`],
      ['cookie', 'b=2'],
    ])
    assert.equal(kept.type, 'allow')
    assert.equal(kept.type === 'allow' && kept.upstream.cookie, 'a=1; b=2')
    const none = answer('envoy', [
      ['Cookie', SESSION],
      ['Cookie', SESSION],
    ])
    assert.deepEqual(none.type === 'allow' && none.remove, ['cookie'])
    const without = answer('envoy', [['Cookie', 'a=1']])
    assert.equal(without.type === 'allow' && without.upstream.cookie, undefined)
  })
})
