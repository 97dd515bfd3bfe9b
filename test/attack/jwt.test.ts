import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import { createHmac, generateKeyPairSync, randomBytes, sign as signBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { CompactEncrypt, decodeJwt } from 'jose'
import { createJwtVerifier } from '../../src/core/jwt.ts'
import { createTestIssuer, signCompact, type TestIssuer } from '../helpers/jwt.ts'
import { addIssuerWithCli } from '../helpers/server-cli.ts'
import {
  assertNoEcho,
  bearer,
  eventually,
  type Gate,
  type GateResponse,
  startGate,
  tenantHeader,
} from './harness.ts'

/**
 * Hostile JWTs against the running server over TLS. Two trusted issuers are registered
 * through the CLI (ES256 and RS256, keys in JWKS files); every forged or malformed token is
 * sent with the right `X-Tenant-Id`, so only the token itself can be the reason for a 401.
 * Every answer is checked for the status, the problem `code`, and that no part of the token
 * comes back in any header or the body.
 */
describe('JWT attacks (over HTTPS)', () => {
  let gate: Gate
  let es: TestIssuer
  let rs: TestIssuer
  /** Counts requests an attacker's URL in `jku`/`x5u` would receive. */
  let lure: { url: string; hits: number; close(): void }
  const attacker = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const attackerJwk = { ...attacker.publicKey.export({ format: 'jwk' }), alg: 'ES256' }
  // ES256's group order n (P-256).
  const N = Buffer.from('ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551', 'hex')

  before(async () => {
    gate = await startGate()
    es = createTestIssuer({ alg: 'ES256', issuer: 'https://es.attack.test', kid: 'es-1' })
    rs = createTestIssuer({ alg: 'RS256', issuer: 'https://rs.attack.test', kid: 'rs-1' })
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
    for (const idp of [es, rs]) {
      await addIssuerWithCli(gate, idp)
      const probe = await sign(idp)
      await eventually(async () => (await call(probe)).status === 200, 5000, idp.config.issuer)
    }
    let hits = 0
    const server = createServer((_request, response) => {
      hits++
      response.writeHead(200, { 'content-type': 'application/json' })
      response.end(JSON.stringify({ keys: [attackerJwk] }))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    lure = {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/keys`,
      get hits() {
        return hits
      },
      close: () => server.close(),
    }
  })

  after(async () => {
    lure?.close()
    await gate?.close()
  })

  let serial = 0
  /** A valid token of `idp` (fresh jti), with claim and header overrides. */
  function sign(idp: TestIssuer, claims: Record<string, unknown> = {}, header = {}) {
    return idp.sign({ tenant_id: 'acme', jti: `j${++serial}`, ...claims }, { header })
  }

  function call(token: string): Promise<GateResponse> {
    return gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('acme')])
  }

  const b64 = (value: string | Buffer) => Buffer.from(value).toString('base64url')
  const json = (value: unknown) => b64(JSON.stringify(value))

  /** Sends `token` and expects a 401 with `code`, nothing of the token echoed. */
  async function refused(token: string, code = 'invalid_token') {
    const r = await call(token)
    assert.equal(r.status, 401, `${r.status} ${r.text}`)
    assert.equal(r.json.code, code, r.text)
    assert.match(String(r.headers['www-authenticate']), /^Bearer realm="tokengate"/)
    assertNoEcho(r, [token])
    return r
  }

  /** Re-signs `signingInput` with the ES256 issuer's real key (the attacker cannot do this). */
  function esSignature(signingInput: string, encoding: 'ieee-p1363' | 'der' = 'ieee-p1363') {
    return signBytes('sha256', Buffer.from(signingInput), {
      key: es.privateKey as never,
      dsaEncoding: encoding,
    })
  }

  it('baseline: a valid token of each issuer → 200 (so every refusal below is the attack)', async () => {
    for (const idp of [es, rs]) assert.equal((await call(await sign(idp))).status, 200)
  })

  for (const alg of ['none', 'None', 'NONE', 'nOnE', 'NoNe', 'nONE']) {
    it(`alg "${alg}" with an empty signature → 401 invalid_token`, async () => {
      await refused(signCompact({ alg, kid: 'es-1' }, es.claims({ tenant_id: 'acme' }), undefined))
    })
  }

  it('alg "none" with a real signature attached, and alg values that only look like none → 401', async () => {
    const payload = es.claims({ tenant_id: 'acme' })
    const input = `${json({ alg: 'none' })}.${json(payload)}`
    await refused(`${input}.${b64(esSignature(input))}`)
    for (const alg of ['none ', ' none', 'none\u0000', '', 'nonE\u200b']) {
      await refused(signCompact({ alg, kid: 'es-1' }, payload, undefined))
    }
  })

  for (const [name, secret] of [
    ['RSA public key PEM', () => Buffer.from(rs.publicPem as string)],
    ['RSA public key JWK JSON', () => Buffer.from(JSON.stringify(rs.publicJwk))],
    ['RSA public key DER', () => rs.publicKey?.export({ format: 'der', type: 'spki' }) as Buffer],
  ] as const) {
    for (const alg of ['HS256', 'HS384']) {
      it(`${alg} signed with the RS256 issuer's ${name} (algorithm confusion) → 401`, async () => {
        const header = { alg, kid: 'rs-1' }
        const token = signCompact(header, rs.claims({ tenant_id: 'acme' }), secret(), alg)
        await refused(token)
      })
    }
  }

  for (const [name, secret] of [
    ['EC public key PEM', () => Buffer.from(es.publicPem as string)],
    ['EC public key JWK JSON', () => Buffer.from(JSON.stringify(es.publicJwk))],
  ] as const) {
    it(`HS256 signed with the ES256 issuer's ${name} (algorithm confusion) → 401`, async () => {
      const token = signCompact(
        { alg: 'HS256', kid: 'es-1' },
        es.claims({ tenant_id: 'acme' }),
        secret(),
      )
      await refused(token)
    })
  }

  it("an embedded jwk header (the attacker's own key) is never trusted → 401", async () => {
    for (const kid of [undefined, 'es-1']) {
      const header = { alg: 'ES256', ...(kid ? { kid } : {}), jwk: attackerJwk }
      await refused(signCompact(header, es.claims({ tenant_id: 'acme' }), attacker.privateKey))
    }
  })

  for (const param of ['jku', 'x5u']) {
    it(`a ${param} header pointing at the attacker's key set is never fetched or trusted → 401`, async () => {
      const before = lure.hits
      for (const kid of [undefined, 'es-1']) {
        const header = { alg: 'ES256', ...(kid ? { kid } : {}), [param]: lure.url }
        await refused(signCompact(header, es.claims({ tenant_id: 'acme' }), attacker.privateKey))
      }
      assert.equal(lure.hits, before, `tokengate fetched the ${param} URL`)
    })
  }

  it("an x5c header carrying the attacker's certificate chain is never trusted → 401", async () => {
    const der = Buffer.from(gate.ca.replace(/-----[^-]+-----|\s/g, ''), 'base64').toString('base64')
    for (const kid of [undefined, 'es-1']) {
      const header = { alg: 'ES256', ...(kid ? { kid } : {}), x5c: [der] }
      await refused(signCompact(header, es.claims({ tenant_id: 'acme' }), attacker.privateKey))
    }
  })

  for (const [name, kid] of [
    ['path traversal', '../../../../../../etc/passwd'],
    ['an absolute file path', '/dev/zero'],
    ['SQL', "es-1' OR '1'='1' --"],
    ['SQL (union)', 'x" UNION SELECT token_hash FROM pats --'],
    ['a URL', 'http://127.0.0.1:1/keys'],
    ['NUL and control characters', 'es-1\u0000\r\n'],
    ['10 KB', 'k'.repeat(10_240)],
  ] as const) {
    it(`a kid with ${name}, signed by the real key → 401, and the server keeps working`, async () => {
      const token = signCompact(
        { alg: 'ES256', kid },
        es.claims({ tenant_id: 'acme' }),
        es.privateKey,
      )
      const r = await call(token)
      // 10 KB of kid pushes the token past the verifier's size bound (still 401).
      assert.equal(r.status, 401, r.text)
      assert.equal(r.json.code, 'invalid_token')
      assertNoEcho(r, [token])
      assert.equal((await call(await sign(es))).status, 200)
    })
  }

  it('an unknown crit header parameter, signed by the real key → 401', async () => {
    const token = await sign(
      es,
      {},
      { crit: ['urn:example:must-understand'], 'urn:example:must-understand': true },
    )
    await refused(token)
  })

  it('crit that is empty, not an array, or names a registered parameter → 401', async () => {
    for (const crit of [[], 'exp', ['alg'], [1]]) await refused(await sign(es, {}, { crit }))
  })

  it('b64: false (RFC 7797 unencoded payload), signed by the real key over the raw payload → 401', async () => {
    const header = json({ alg: 'ES256', kid: 'es-1', b64: false, crit: ['b64'] })
    const payload = JSON.stringify(es.claims({ tenant_id: 'acme' }))
    const signature = b64(esSignature(`${header}.${payload}`))
    await refused(`${header}..${signature}`)
    await refused(`${header}.${b64(payload)}.${signature}`)
    await refused(await sign(es, {}, { b64: false }))
  })

  /** A valid ES256 token whose signature is replaced by `signature`. */
  async function withSignature(signature: Buffer | string) {
    const [h, p] = (await sign(es)).split('.')
    return `${h}.${p}.${typeof signature === 'string' ? signature : b64(signature)}`
  }

  for (const [name, make] of [
    ['r = s = 0', () => Buffer.alloc(64)],
    ['r = 0, s = 1', () => Buffer.concat([Buffer.alloc(32), Buffer.alloc(31), Buffer.from([1])])],
    ['r = s = n (the group order)', () => Buffer.concat([N, N])],
    ['r = s = n + 1 (≥ n)', () => Buffer.concat([plusOne(N), plusOne(N)])],
    ['all bits set (r, s > n)', () => Buffer.alloc(64, 0xff)],
    ['one byte short (63 bytes)', () => Buffer.alloc(63, 1)],
    ['one byte long (65 bytes)', () => Buffer.alloc(65, 1)],
    ['a P-384-sized signature (96 bytes)', () => Buffer.alloc(96, 1)],
    ['empty after the dot', () => Buffer.alloc(0)],
  ] as const) {
    it(`ES256 signature with ${name} → 401`, async () => {
      await refused(await withSignature(make()))
    })
  }

  it('ES256 signature with r or s replaced by n minus it, or by r ± n → 401', async () => {
    const token = await sign(es)
    const sig = Buffer.from(token.split('.')[2] as string, 'base64url')
    const r = sig.subarray(0, 32)
    const s = sig.subarray(32)
    await refused(await withSignature(Buffer.concat([r, r])))
    await refused(await withSignature(Buffer.concat([s, r])))
    await refused(await withSignature(Buffer.concat([Buffer.alloc(32), s])))
    await refused(await withSignature(Buffer.concat([r, Buffer.alloc(32)])))
  })

  it('ES256 signature in DER (ASN.1) encoding instead of IEEE P1363 → 401, even when it is a real signature', async () => {
    const valid = await sign(es)
    const [h, p] = valid.split('.') as [string, string]
    await refused(`${h}.${p}.${b64(esSignature(`${h}.${p}`, 'der'))}`)
  })

  for (const [name, change] of [
    ['base64url padding "="', (sig: string) => `${sig}=`],
    ['base64url padding "=="', (sig: string) => `${sig}==`],
    [
      'the standard base64 alphabet (+ and / for - and _)',
      (sig: string) => sig.replaceAll('-', '+').replaceAll('_', '/'),
    ],
  ] as const) {
    it(`ES256 signature re-encoded with ${name}: documented result (same bytes, not a forgery)`, async (t) => {
      // Some base64 decoders (Node's Buffer among them) ignore padding and accept both
      // alphabets, so a re-encoded signature may decode to the same valid bytes: a second
      // string for the same signed token, never a token with other claims.
      let token = await sign(es)
      while (!/[-_]/.test(token.split('.')[2] as string) && name.includes('alphabet')) {
        token = await sign(es)
      }
      const [h, p, sig] = token.split('.') as [string, string, string]
      const r = await call(`${h}.${p}.${change(sig)}`)
      assert.ok(r.status === 200 || r.status === 401, r.text)
      if (r.status === 200) assert.equal(r.json.tenantId, 'acme')
      else assert.match(String(r.json.code), /^(invalid_token|malformed_authorization)$/)
      t.diagnostic(`${name}: ${r.status}`)
    })
  }

  it('the high-S twin of a valid ES256 signature (s → n − s) is the same signed claims: documented result', async (t) => {
    // ECDSA signatures are malleable: (r, n − s) verifies whenever (r, s) does. It is not a
    // forgery (the claims are the ones the issuer signed), but it is a second string for one
    // token. tokengate never keys anything security-relevant on the token string alone
    // (revocation of JWTs is by expiry), so either answer is safe; this test records which.
    const token = await sign(es)
    const [h, p, s] = token.split('.') as [string, string, string]
    const sig = Buffer.from(s, 'base64url')
    const twin = Buffer.concat([sig.subarray(0, 32), minus(N, sig.subarray(32))])
    const r = await call(`${h}.${p}.${b64(twin)}`)
    assert.ok(r.status === 200 || r.status === 401, r.text)
    if (r.status === 200) assert.equal(r.json.tenantId, 'acme')
    t.diagnostic(`high-S twin answered ${r.status}`)
  })

  it('signature stripped (empty third segment, or only two segments) → 401', async () => {
    const [h, p] = (await sign(es)).split('.')
    await refused(`${h}.${p}.`)
    await refused(`${h}.${p}`)
    await refused(`${h}..`)
  })

  it('payload swapped between two valid tokens of the same issuer → 401', async () => {
    const a = (await sign(es, { sub: 'alice' })).split('.')
    const b = (
      await sign(es, { sub: 'mallory', permissions: ['tokens:read', 'tokens:revoke'] })
    ).split('.')
    await refused(`${a[0]}.${b[1]}.${a[2]}`)
    await refused(`${b[0]}.${a[1]}.${b[2]}`)
  })

  it('payload swapped between tokens of two different issuers → 401', async () => {
    const a = (await sign(es)).split('.')
    const b = (await sign(rs)).split('.')
    await refused(`${a[0]}.${b[1]}.${a[2]}`)
    await refused(`${b[0]}.${a[1]}.${b[2]}`)
  })

  const now = () => Math.floor(Date.now() / 1000)
  for (const [name, claims, code] of [
    ['exp as a string', () => ({ exp: String(now() + 300) }), 'invalid_token'],
    [
      'exp as a numeric string with a fraction',
      () => ({ exp: `${now() + 300}.5` }),
      'invalid_token',
    ],
    ['exp as a boolean', () => ({ exp: true }), 'invalid_token'],
    ['exp as null', () => ({ exp: null }), 'invalid_token'],
    ['exp missing', () => ({ exp: undefined }), 'invalid_token'],
    ['exp far in the future (year 275760)', () => ({ exp: 8.64e12 }), 'invalid_token'],
    ['exp = 1e308', () => ({ exp: 1e308 }), 'invalid_token'],
    ['exp = 2^53 + 2', () => ({ exp: 2 ** 53 + 2 }), 'invalid_token'],
    ['exp negative', () => ({ exp: -1 }), 'token_expired'],
    ['exp = 0', () => ({ exp: 0 }), 'token_expired'],
    ['nbf as a string', () => ({ nbf: String(now()) }), 'invalid_token'],
    ['nbf far in the future', () => ({ nbf: now() + 10 ** 9 }), 'invalid_token'],
    ['nbf = 1e308', () => ({ nbf: 1e308 }), 'invalid_token'],
    ['iat as a string', () => ({ iat: String(now()) }), 'invalid_token'],
    ['iat in the future', () => ({ iat: now() + 3600, exp: now() + 3900 }), 'invalid_token'],
    ['iat negative with a short exp (lifetime too long)', () => ({ iat: -1 }), 'invalid_token'],
    ['iat = 1e308', () => ({ iat: 1e308 }), 'invalid_token'],
  ] as const) {
    it(`${name}, signed by the real key → 401 ${code}`, async () => {
      await refused(await sign(es, claims()), code)
    })
  }

  it('exp and iat as floats (RFC 7519 NumericDate allows fractions), signed by the real key → 200', async () => {
    const r = await call(await sign(es, { iat: now() + 0.25, exp: now() + 300.75 }))
    assert.equal(r.status, 200, r.text)
  })

  it('duplicate JSON keys: the last value wins, as with JSON.parse and jose, for the tenant claim', async () => {
    const claims = es.claims({ tenant_id: 'acme' })
    const { tenant_id: _drop, ...rest } = claims
    const raw = `${JSON.stringify(rest).slice(0, -1)},"tenant_id":"other","tenant_id":"acme"}`
    assert.equal(JSON.parse(raw).tenant_id, 'acme', 'JSON.parse keeps the last')
    const header = json({ alg: 'ES256', kid: 'es-1' })
    const input = `${header}.${b64(raw)}`
    const token = `${input}.${b64(esSignature(input))}`
    assert.equal(decodeJwt(token).tenant_id, 'acme', 'jose keeps the last')
    assert.equal((await call(token)).status, 200)
    const other = await gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('other')])
    assert.equal(other.json.code, 'tenant_mismatch')
  })

  it('duplicate alg in the header: {"alg":"ES256","alg":"none"} is alg none → 401', async () => {
    const header = b64('{"alg":"ES256","kid":"es-1","alg":"none"}')
    const input = `${header}.${json(es.claims({ tenant_id: 'acme' }))}`
    await refused(`${input}.${b64(esSignature(input))}`)
    await refused(`${input}.`)
  })

  it('nested JWT (cty: JWT) whose payload is another token → 401; the inner token is never unwrapped', async () => {
    const inner = await sign(es)
    const header = json({ alg: 'ES256', kid: 'es-1', cty: 'JWT' })
    const input = `${header}.${b64(inner)}`
    await refused(`${input}.${b64(esSignature(input))}`)
    const forgedInner = signCompact({ alg: 'none' }, es.claims({ tenant_id: 'acme' }), undefined)
    const outer = `${header}.${b64(forgedInner)}`
    await refused(`${outer}.${b64(esSignature(outer))}`)
  })

  it('a JWE (five segments, encrypted) where a JWS is expected → 401', async () => {
    const jwe = await new CompactEncrypt(Buffer.from(await sign(es)))
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', cty: 'JWT', kid: 'es-1' })
      .encrypt(randomBytes(32))
    assert.equal(jwe.split('.').length, 5)
    await refused(jwe)
  })

  it('a JWS in JSON serialization, or with four or six segments → 401', async () => {
    const [h, p, s] = (await sign(es)).split('.')
    await refused(b64(JSON.stringify({ protected: h, payload: p, signature: s })))
    await refused(`${h}.${p}.${s}.${s}`)
    await refused(`${h}.${p}.${s}.${s}.${s}.${s}`)
  })

  it('a 100 KB token is refused before any parsing: 431 from the HTTP layer (raw socket), and the verifier refuses it too', async () => {
    const big = await sign(es, { padding: 'x'.repeat(100_000) })
    const r = await gate.raw(
      `GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Tenant-Id: acme\r\nAuthorization: Bearer ${big}\r\nConnection: close\r\n\r\n`,
    )
    assert.equal(r.status, 431, r.text)
    assert.ok(!r.text.includes(big.split('.')[1]?.slice(0, 64) as string))
    const verifier = createJwtVerifier([es.config])
    const outcome = await verifier.verify(big)
    verifier.close()
    assert.equal(outcome.ok, false)
    assert.equal(!outcome.ok && outcome.failure.code, 'invalid_token')
    assert.equal((await call(await sign(es))).status, 200, 'the server still answers')
  })

  it('a token under the header limit but over the verifier bound (about 11 KB) → 401 invalid_token', async () => {
    await refused(await sign(es, { padding: 'x'.repeat(8000) }))
  })

  it('segments that decode to non-UTF-8 bytes, signed by the real key → 401', async () => {
    const bad = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]) // {"a":"\xff\xfe"}
    const claims = Buffer.from(JSON.stringify(es.claims({ tenant_id: 'acme' })).slice(0, -1))
    const payload = Buffer.concat([
      claims,
      Buffer.from(',"x":"'),
      Buffer.from([0xc3, 0x28]),
      Buffer.from('"}'),
    ])
    const header = json({ alg: 'ES256', kid: 'es-1' })
    for (const [h, p] of [
      [b64(bad), json(es.claims({ tenant_id: 'acme' }))],
      [header, b64(payload)],
      [header, b64(Buffer.from([0xff, 0xfe, 0xfd]))],
    ] as const) {
      const input = `${h}.${p}`
      const r = await call(`${input}.${b64(esSignature(input))}`)
      assert.equal(r.status, 401, `${h}.${p}: ${r.text}`)
    }
  })

  it('non-ASCII bytes in the Authorization value itself (raw socket) → 401 malformed_authorization', async () => {
    const token = await sign(es)
    const value = Buffer.concat([
      Buffer.from(`Bearer ${token.slice(0, 20)}`),
      Buffer.from([0xc3, 0xa9, 0xff]),
      Buffer.from(token.slice(20)),
    ])
    const head = Buffer.from(
      `GET /api/v1/me HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Tenant-Id: acme\r\nConnection: close\r\nAuthorization: `,
    )
    const r = await gate.raw(Buffer.concat([head, value, Buffer.from('\r\n\r\n')]))
    assert.equal(r.status, 401, r.text)
    assert.match(r.text, /"code":"malformed_authorization"/)
    assert.ok(!r.text.includes(token.split('.')[1] as string))
  })

  it('an HS256 token for an issuer that trusts only asymmetric keys is refused even with a correct-looking kid and a 64-byte secret', async () => {
    const token = signCompact(
      { alg: 'HS256', kid: 'es-1' },
      es.claims({ tenant_id: 'acme' }),
      randomBytes(64),
    )
    await refused(token)
    const forged = createHmac('sha256', 'secret').update('x').digest('base64url')
    await refused(`${json({ alg: 'HS256' })}.${json(es.claims({ tenant_id: 'acme' }))}.${forged}`)
  })
})

function plusOne(value: Buffer): Buffer {
  const out = Buffer.from(value)
  for (let i = out.length - 1; i >= 0; i--) {
    out[i] = ((out[i] as number) + 1) & 0xff
    if (out[i] !== 0) break
  }
  return out
}

/** a − b for 32-byte big-endian unsigned integers (a > b). */
function minus(a: Buffer, b: Buffer): Buffer {
  const out = Buffer.alloc(32)
  let borrow = 0
  for (let i = 31; i >= 0; i--) {
    let d = (a[i] as number) - (b[i] as number) - borrow
    borrow = d < 0 ? 1 : 0
    if (d < 0) d += 256
    out[i] = d
  }
  return out
}
