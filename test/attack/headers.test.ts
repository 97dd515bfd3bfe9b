import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { assertNoEcho, type Gate, startGate } from './harness.ts'

/**
 * Hostile `Authorization` and `X-Tenant-Id` headers over TLS. What Node's HTTP client refuses
 * to send (CR, LF, NUL, obs-fold) goes over a raw TLS socket; the server must answer 400 or
 * 401, never crash, and keep serving.
 */
describe('header attacks (over HTTPS, raw sockets where needed)', () => {
  let gate: Gate
  let pat: string
  let token: string

  before(async () => {
    gate = await startGate()
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
    const issued = await gate.cli('pat', 'issue', '--tenant', 'acme', '--subject', 'svc', '--json')
    pat = (JSON.parse(issued.stdout) as { token: string }).token
    const minted = await gate.cli('jwt', 'mint', '--dev', '--tenant', 'acme', '--subject', 'dev')
    token = minted.stdout.trim()
    assert.equal(minted.code, 0, minted.stderr)
  })

  after(async () => {
    await gate?.close()
  })

  /** Sends a raw request head (CRLF line ends added) and returns status and text. */
  async function raw(lines: readonly string[]) {
    const head = ['GET /api/v1/me HTTP/1.1', 'Host: 127.0.0.1', ...lines, 'Connection: close']
    return gate.raw(`${head.join('\r\n')}\r\n\r\n`)
  }

  function codeOf(text: string): string | undefined {
    return /"code":"([a-z_]+)"/.exec(text)?.[1]
  }

  async function stillServing() {
    const r = await gate.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])
    assert.equal(r.status, 200, 'the server still serves after the attack')
  }

  it('baseline: the PAT and the dev JWT work over a raw socket', async () => {
    assert.equal((await raw([`Authorization: Bearer ${pat}`])).status, 200)
    assert.equal((await raw([`Authorization: Bearer ${token}`, 'X-Tenant-Id: acme'])).status, 200)
  })

  for (const [name, value] of [
    ['lowercase "bearer"', () => `bearer ${pat}`],
    ['uppercase "BEARER"', () => `BEARER ${pat}`],
    ['two spaces after Bearer', () => `Bearer  ${pat}`],
    ['five spaces after Bearer', () => `Bearer     ${pat}`],
    ['a tab after Bearer', () => `Bearer\t${pat}`],
    ['a tab and a space', () => `Bearer\t ${pat}`],
    ['comma-joined tokens', () => `Bearer ${pat},${pat}`],
    ['comma-joined credentials', () => `Bearer ${pat}, Bearer ${pat}`],
    ['a space inside the token', () => `Bearer ${pat.slice(0, 10)} ${pat.slice(10)}`],
    ['"Bearer" with no token', () => 'Bearer'],
    ['another scheme (Basic)', () => `Basic ${Buffer.from(`x:${pat}`).toString('base64')}`],
    ['the token without a scheme', () => pat],
    ['a quoted token', () => `Bearer "${pat}"`],
  ] as const) {
    it(`Authorization with ${name} → 401 malformed_authorization, nothing echoed`, async () => {
      const r = await gate.request('/api/v1/me', ['Authorization', value()])
      assert.equal(r.status, 401, r.text)
      assert.equal(r.json.code, 'malformed_authorization')
      assert.match(String(r.headers['www-authenticate']), /error="invalid_request"/)
      assertNoEcho(r, [pat])
    })
  }

  it('two Authorization headers (both valid) → 401 malformed_authorization', async () => {
    const r = await gate.request('/api/v1/me', [
      'Authorization',
      `Bearer ${pat}`,
      'Authorization',
      `Bearer ${pat}`,
    ])
    assert.equal(r.json.code, 'malformed_authorization')
    const mixed = await raw([
      `Authorization: Bearer ${pat}`,
      `authorization: Bearer ${token}`,
      'X-Tenant-Id: acme',
    ])
    assert.equal(mixed.status, 401)
    assert.equal(codeOf(mixed.text), 'malformed_authorization')
  })

  it('two X-Tenant-Id headers (both right) → 401 tenant_mismatch for a JWT and for a PAT', async () => {
    for (const credential of [token, pat]) {
      const r = await raw([
        `Authorization: Bearer ${credential}`,
        'X-Tenant-Id: acme',
        'x-tenant-id: acme',
      ])
      assert.equal(r.status, 401, r.text)
      assert.equal(codeOf(r.text), 'tenant_mismatch')
    }
  })

  it('whitespace around X-Tenant-Id is optional whitespace that HTTP strips (RFC 9110 §5.5): accepted', async () => {
    // Documented behaviour: Node removes leading/trailing SP and HTAB from field values
    // before tokengate sees them, so " acme\t" arrives as "acme". Inner whitespace is kept.
    for (const value of [' acme', 'acme ', '\tacme\t', '   acme   ']) {
      const r = await raw([`Authorization: Bearer ${token}`, `X-Tenant-Id:${value}`])
      assert.equal(r.status, 200, JSON.stringify(value))
    }
    const inner = await raw([`Authorization: Bearer ${token}`, 'X-Tenant-Id: ac me'])
    assert.equal(codeOf(inner.text), 'tenant_mismatch')
  })

  it('X-Tenant-Id that differs by case, is empty, or carries a comma list → 401 tenant_mismatch', async () => {
    for (const value of ['ACME', 'Acme', '', 'acme,acme', 'acme, other']) {
      const r = await raw([`Authorization: Bearer ${token}`, `X-Tenant-Id: ${value}`])
      assert.equal(r.status, 401, value)
      assert.equal(codeOf(r.text), 'tenant_mismatch', value)
    }
  })

  it('trailing whitespace after the token is optional whitespace that HTTP strips: accepted', async () => {
    const r = await raw([`Authorization: Bearer ${pat}  \t`])
    assert.equal(r.status, 200)
  })

  for (const [name, lines] of [
    [
      'a bare CR inside the Authorization value',
      (p: string) => [`Authorization: Bearer ${p}\rX-Tenant-Id: acme`],
    ],
    [
      'a bare LF inside the Authorization value',
      (p: string) => [`Authorization: Bearer ${p}\nX-Tenant-Id: acme`],
    ],
    ['a NUL byte in the Authorization value', (p: string) => [`Authorization: Bearer ${p}\u0000`]],
    [
      'an obs-fold continuation line',
      (p: string) => [`Authorization: Bearer ${p}`, ` Bearer ${p}`],
    ],
    ['a space before the colon', (p: string) => [`Authorization : Bearer ${p}`]],
    ['a CR/LF-split scheme', (p: string) => [`Authorization: Bearer\r\n ${p}`]],
  ] as const) {
    it(`${name} (raw socket) → 400 from the HTTP parser, no crash, nothing echoed`, async () => {
      const r = await raw(lines(pat))
      assert.equal(r.status, 400, r.text)
      assert.ok(!r.text.includes(pat), 'the token was echoed')
      await stillServing()
    })
  }

  it('CR/LF smuggling attempts through Node’s own client are refused before sending', async () => {
    await assert.rejects(
      gate.request('/api/v1/me', ['Authorization', `Bearer ${pat}\r\nX-Tenant-Id: acme`]),
      {
        code: 'ERR_INVALID_CHAR',
      },
    )
    await stillServing()
  })

  it('header names are case-insensitive, but look-alike names do not count', async () => {
    assert.equal((await raw([`AUTHORIZATION: Bearer ${pat}`])).status, 200)
    // U+212A KELVIN SIGN is not "k": such a name is another header, and HTTP refuses it.
    const lookalike = await gate.raw(
      Buffer.concat([
        Buffer.from('GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAuthori'),
        Buffer.from('\u212a', 'utf8'),
        Buffer.from(`ation: Bearer ${pat}\r\n\r\n`),
      ]),
    )
    assert.ok(lookalike.status === 400 || lookalike.status === 401, lookalike.text)
    assert.ok(!lookalike.text.includes(pat))
  })

  it('a request line or header block of garbage → 400, and the server keeps serving', async () => {
    for (const bytes of [
      'GARBAGE\r\n\r\n',
      'GET / HTTP/9.9\r\n\r\n',
      '\u0000\u0001\u0002\r\n\r\n',
    ]) {
      const r = await gate.raw(bytes)
      assert.ok(r.status === undefined || (r.status >= 400 && r.status < 500), r.text)
    }
    await stillServing()
  })
})
