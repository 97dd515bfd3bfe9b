/**
 * The header reads under every decision, spoken to directly: names matched as ASCII only
 * (a look-alike is another header), exactly-once values, and each decider's own memo of the
 * origin its proxy states (no reading shared between listeners through module state).
 */
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { headerValues } from '../../src/core/raw-headers.ts'
import {
  createOriginReader,
  readForwardedRequest,
  soleValue,
} from '../../src/decision/forwarded-request.ts'

const KELVIN = '\u212a'

describe('decision header reads', () => {
  test('a name with a Unicode look-alike is not the ASCII header (Kelvin sign for k)', () => {
    // Envoy's gRPC CheckRequest carries names as UTF-8 strings: String#toLowerCase maps the
    // Kelvin sign onto `k`, so a lower-casing compare would read `coo\u212aie` as Cookie.
    const raw = [`coo${KELVIN}ie`, 'tg_session=x', 'Cookie', 'a=1']
    assert.deepEqual(headerValues(raw, 'cookie'), ['a=1'])
    assert.equal(soleValue(raw, 'cookie'), 'a=1')
    assert.equal(soleValue([`X-Forwarded-Proto`, 'https', `x-${KELVIN}`, 'v'], 'x-k'), undefined)
  })

  test('exactly once: a repeated or absent header has no sole value, in any spelling', () => {
    const raw = ['X-Original-URI', '/api/v1/a', 'x-original-uri', '/api/v1/b', 'Host', 'h']
    assert.equal(soleValue(raw, 'x-original-uri'), undefined)
    assert.equal(soleValue(raw, 'host'), 'h')
    assert.equal(soleValue(raw, 'x-original-method'), undefined)
    assert.deepEqual(headerValues(raw, 'x-original-uri'), ['/api/v1/a', '/api/v1/b'])
  })

  test('the family read in one pass refuses the same statements as before', () => {
    const ask = (...extra: string[]) =>
      readForwardedRequest(
        ['X-Original-Method', 'GET', 'X-Original-URI', '/api/v1/a', ...extra],
        { method: 'GET', url: '/_tokengate' },
        { kind: 'nginx', pathPrefix: '' },
      )
    assert.deepEqual(ask(), { ok: true, method: 'GET', url: '/api/v1/a', origin: undefined })
    const twice = {
      ok: false,
      reason: 'send exactly one x-original-uri and one x-original-method header',
    }
    assert.deepEqual(ask('x-original-URI', '/api/v1/b'), twice)
    assert.deepEqual(ask('X-ORIGINAL-METHOD', 'POST'), twice)
    assert.deepEqual(ask(`x-original-uri${KELVIN}`, '/x'), {
      ok: true,
      method: 'GET',
      url: '/api/v1/a',
      origin: undefined,
    })
    // A CR or LF inside a value is no path: refused, never decided on.
    assert.equal(
      readForwardedRequest(
        ['X-Original-Method', 'GET', 'X-Original-URI', '/api/v1/a\r\nX-Auth-Tenant: t'],
        { method: 'GET', url: '/_tokengate' },
        { kind: 'nginx', pathPrefix: '' },
      ).ok,
      false,
    )
    // X-Forwarded-Proto or -Host sent twice: no origin stated (the request line's Host then).
    const proto = ['X-Forwarded-Proto', 'https', 'X-Forwarded-Host', 'api.example']
    assert.equal((ask(...proto) as { origin?: string }).origin, 'https://api.example')
    assert.equal(
      (ask(...proto, 'x-forwarded-proto', 'http') as { origin?: string }).origin,
      undefined,
    )
    assert.equal(
      (ask(...proto, 'X-Forwarded-Host', 'evil') as { origin?: string }).origin,
      undefined,
    )
  })

  test('each origin reader keeps its own last reading', () => {
    const a = createOriginReader()
    const b = createOriginReader()
    assert.equal(a('https', 'a.example'), 'https://a.example')
    assert.equal(b('HTTP', 'B.example'), 'http://b.example')
    assert.equal(a('https', 'a.example'), 'https://a.example')
    assert.equal(b('https', 'bad host'), undefined)
    assert.equal(a('https', 'a.example'), 'https://a.example')
    assert.equal(b('http', 'b.example'), 'http://b.example')
    assert.equal(a(undefined, 'a.example'), undefined)
    assert.equal(a('ftp', 'a.example'), undefined)
  })

  test('a decider reads origins through its own reader, not a module-level memo', async () => {
    // Two readers handed to two reads alternate hosts: each read states its own origin.
    const [one, two] = [createOriginReader(), createOriginReader()]
    const read = (origins: typeof one, host: string) =>
      readForwardedRequest(
        [
          'X-Original-Method',
          'GET',
          'X-Original-URI',
          '/api/v1/a',
          'X-Forwarded-Proto',
          'https',
          'X-Forwarded-Host',
          host,
        ],
        { method: 'GET', url: '/_tokengate' },
        { kind: 'nginx', pathPrefix: '', origins },
      )
    for (let i = 0; i < 3; i++) {
      assert.equal((read(one, 'one.example') as { origin?: string }).origin, 'https://one.example')
      assert.equal((read(two, 'two.example') as { origin?: string }).origin, 'https://two.example')
    }
    const source = await import('node:fs').then((fs) =>
      fs.readFileSync(new URL('../../src/decision/forwarded-request.ts', import.meta.url), 'utf8'),
    )
    assert.doesNotMatch(source, /^let /m, 'forwarded-request.ts keeps no module-level state')
  })
})
