import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import {
  createTestIssuer,
  type KeyServer,
  startKeyServer,
  type TestIssuer,
} from '../helpers/jwt.ts'
import {
  bearer,
  eventually,
  type Gate,
  type GateResponse,
  startGate,
  tenantHeader,
} from './harness.ts'

/**
 * Key-source outages over the wire: the real server over TLS, a real local JWKS endpoint per
 * issuer, issuers registered through the CLI, and tokengate's clock moved forward instead of
 * waiting. Timings are the defaults (max age 10 min, cooldown 30 s, stale 1 h) except the
 * fetch timeout (1 s, so a hanging endpoint is quick to show).
 */
describe('key-source outages (over HTTPS, real JWKS endpoints)', () => {
  let gate: Gate
  const hosts: KeyServer[] = []
  let serial = 0

  const MAX_AGE = 600_000
  const COOLDOWN = 30_000
  const STALE = 3_600_000

  before(async () => {
    gate = await startGate({ auth: { jwksTimeoutMs: 1000 } })
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
  })

  after(async () => {
    await gate?.close()
    for (const host of hosts) await host.close()
  })

  interface Remote {
    readonly issuer: TestIssuer
    readonly host: KeyServer
    /**
     * A fresh token (new jti: never served from the verified-token cache), issued at `nowMs`
     * (default: tokengate's clock now).
     */
    token(header?: Record<string, unknown>, signer?: TestIssuer, nowMs?: number): Promise<string>
    call(token: string): Promise<GateResponse>
    /** The issuer's next signing key (kid k2), not published until the test does. */
    successor(): TestIssuer
  }

  /** Registers a new issuer whose keys are served by a new local endpoint. */
  async function remote(options: { mode?: 'ok' | 'error' } = {}) {
    const iss = `https://idp-${++serial}.outage.test`
    const issuer = createTestIssuer({ issuer: iss, kid: 'k1', clock: gate.clock })
    const host = await startKeyServer({ keys: [issuer.publicJwk] })
    hosts.push(host)
    host.setMode(options.mode ?? 'ok')
    const added = await gate.cli(
      'issuer',
      'add',
      '--issuer',
      iss,
      '--audience',
      'tokengate',
      '--jwks-url',
      host.url,
    )
    assert.equal(added.code, 0, added.stderr)
    let jti = 0
    const r: Remote = {
      issuer,
      host,
      token: (header = {}, signer = issuer, nowMs = undefined) =>
        signer.sign({ iss, tenant_id: 'acme', jti: `${serial}-${++jti}` }, { header, nowMs }),
      call: (token) => gate.request('/api/v1/me', [...bearer(token), ...tenantHeader('acme')]),
      successor: () => createTestIssuer({ issuer: iss, kid: 'k2', clock: gate.clock }),
    }
    // The server learns of the issuer through its store, then loads its keys at once.
    const expected = (options.mode ?? 'ok') === 'ok' ? 200 : 503
    await eventually(async () => (await r.call(await r.token())).status === expected, 5000, iss)
    return r
  }

  async function readiness() {
    const r = await gate.request('/readyz')
    assert.equal(r.status, 200, r.text)
    return r.json as {
      status: string
      checks: { issuers: { remote: number; notLoaded: string[]; stale: string[] } }
    }
  }

  function assertUnavailable(r: GateResponse) {
    assert.equal(r.status, 503, r.text)
    assert.equal(r.json.code, 'unavailable')
    assert.match(String(r.headers['retry-after']), /^[1-9]\d*$/)
    assert.equal(r.headers['www-authenticate'], undefined, 'a 503 carries no challenge')
  }

  it('keys are fetched once and cached: 20 distinct tokens cost no JWKS request beyond the first load', async () => {
    const idp = await remote()
    const before = idp.host.requests
    for (let i = 0; i < 20; i++) assert.equal((await idp.call(await idp.token())).status, 200)
    assert.equal(idp.host.requests, before)
    assert.equal(before, 1, 'one load when the issuer was added')
  })

  it('keys past the max age are refetched on the next token, once', async () => {
    const idp = await remote()
    gate.clock.advance(MAX_AGE)
    for (let i = 0; i < 5; i++) assert.equal((await idp.call(await idp.token())).status, 200)
    assert.equal(idp.host.requests, 2)
  })

  it('32 concurrent requests needing keys share one JWKS request (in-flight de-duplication)', async () => {
    const idp = await remote({ mode: 'error' })
    await eventually(async () => idp.host.requests >= 1, 5000, 'the failed first load')
    gate.clock.advance(COOLDOWN)
    idp.host.setMode('ok')
    idp.host.setDelay(300)
    const before = idp.host.requests
    const tokens = await Promise.all(Array.from({ length: 32 }, () => idp.token()))
    const answers = await Promise.all(tokens.map((t) => idp.call(t)))
    assert.deepEqual(
      answers.map((a) => a.status),
      tokens.map(() => 200),
    )
    assert.equal(idp.host.requests - before, 1)
  })

  it('an unknown kid causes one refetch, then the cooldown holds: 401 invalid_token, no more fetches', async () => {
    const idp = await remote()
    // Issued a minute before the refetch below (more than the 30 s clock tolerance): the keys
    // tokengate then holds are newer than these tokens, so their made-up kids are known to be
    // unknown (401) even during the cooldown.
    const issuedMs = gate.clock.now() - COOLDOWN
    gate.clock.advance(COOLDOWN)
    const before = idp.host.requests
    for (let i = 0; i < 10; i++) {
      const r = await idp.call(await idp.token({ kid: `nope-${i}` }, idp.issuer, issuedMs))
      assert.equal(r.status, 401, r.text)
      assert.equal(r.json.code, 'invalid_token')
    }
    assert.equal(idp.host.requests - before, 1)
    gate.clock.advance(COOLDOWN)
    await idp.call(await idp.token({ kid: 'nope-after-cooldown' }))
    assert.equal(idp.host.requests - before, 2)
  })

  it('made-up kids with a forged fresh iat get 503 during the cooldown and no more than one JWKS request per cooldown', async () => {
    const idp = await remote()
    const before = idp.host.requests
    const statuses: number[] = []
    // Two minutes of one forged token (iat = now, new made-up kid) every second.
    for (let second = 1; second <= 120; second++) {
      gate.clock.advance(1000)
      const r = await idp.call(await idp.token({ kid: `forged-${second}` }))
      if (r.status === 503) assertUnavailable(r)
      statuses.push(r.status)
    }
    assert.ok(
      statuses.every((status) => status === 401 || status === 503),
      statuses.join(' '),
    )
    const fetches = idp.host.requests - before
    assert.ok(fetches >= 3 && fetches <= 120_000 / COOLDOWN, `${fetches} JWKS requests in 120 s`)
    assert.equal(statuses.filter((status) => status === 401).length, fetches, 'a 401 per refetch')
  })

  it('key rotation (new kid published, old one removed) is picked up without restart and without a false 401', async () => {
    const idp = await remote()
    const next = idp.successor()
    // The provider rotates, and a token with the new kid arrives long before the cached
    // keys' max age: the unknown kid must trigger a refetch, not a 401.
    idp.host.setJwks({ keys: [next.publicJwk] })
    // An old-key token issued a minute before tokengate's refetch, presented after it.
    const oldToken = await idp.token({}, idp.issuer, gate.clock.now() - COOLDOWN)
    gate.clock.advance(COOLDOWN)
    const first = await idp.call(await idp.token({ kid: 'k2' }, next))
    assert.equal(first.status, 200, first.text)
    for (let i = 0; i < 5; i++)
      assert.equal((await idp.call(await idp.token({ kid: 'k2' }, next))).status, 200)
    // The old key is gone from the provider: its tokens, issued before tokengate's last
    // fetch, are refused at once (not 503: the keys held are newer than the token).
    const old = await idp.call(oldToken)
    assert.equal(old.status, 401)
    assert.equal(old.json.code, 'invalid_token')
  })

  /** The `request` log line of the last answer with this status, parsed. */
  function lastRequestLine(status: number): Record<string, unknown> {
    const lines = gate.logs
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.msg === 'request' && line.status === status)
    const last = lines.at(-1)
    assert.ok(last, `a request line with status ${status}`)
    return last
  }

  it('withdrawal cuts cached tokens: a token verified before its key was withdrawn gets 401 once the max age brings a refetch (started by the cached token itself, in the background)', async () => {
    const idp = await remote()
    const next = idp.successor()
    const iss = idp.issuer.config.issuer
    // Valid for an hour: only the withdrawal can refuse it within the test.
    const cached = await idp.issuer.sign(
      { iss, tenant_id: 'acme', jti: `${iss}-cached` },
      { expiresInSec: 3600 },
    )
    assert.equal((await idp.call(cached)).status, 200, 'verified, now in the verified-token cache')
    idp.host.setJwks({ keys: [next.publicJwk] })
    // Within the max age nothing has read the key set yet: the token still passes.
    gate.clock.advance(MAX_AGE / 2)
    assert.equal((await idp.call(cached)).status, 200)
    gate.clock.advance(MAX_AGE / 2)
    const before = idp.host.requests
    // The first call past the max age is served from the cache (no caller waits on the
    // provider for a cached token) and starts the read; the calls after that read are 401.
    const first = await idp.call(cached)
    assert.ok([200, 401].includes(first.status), first.text)
    await eventually(async () => (await idp.call(cached)).status === 401, 2000, 'the 401')
    const r = await idp.call(cached)
    assert.equal(r.status, 401, r.text)
    assert.equal(r.json.code, 'invalid_token')
    assert.equal(r.json.detail, 'the signing key has been withdrawn by its issuer')
    assert.equal(idp.host.requests - before, 1, 'the cached token itself brought the refetch')
  })

  it('a cached token never waits on the provider: past the max age with the JWKS hanging, it is answered before the fetch times out', async () => {
    const idp = await remote()
    const cached = await idp.issuer.sign(
      { iss: idp.issuer.config.issuer, tenant_id: 'acme', jti: 'hang-cached' },
      { expiresInSec: 3600 },
    )
    assert.equal((await idp.call(cached)).status, 200)
    idp.host.setMode('hang')
    gate.clock.advance(MAX_AGE)
    const before = idp.host.requests
    const started = performance.now()
    const r = await idp.call(cached)
    const elapsed = performance.now() - started
    assert.equal(r.status, 200, r.text)
    assert.ok(elapsed < 900, `answered after ${Math.round(elapsed)} ms (fetch timeout 1000 ms)`)
    await eventually(async () => idp.host.requests - before === 1, 2000, 'the background read')
  })

  it('withdrawal cuts cached tokens at once when an unknown-kid refetch drops the key', async () => {
    const idp = await remote()
    const next = idp.successor()
    const cached = await idp.token()
    assert.equal((await idp.call(cached)).status, 200)
    idp.host.setJwks({ keys: [next.publicJwk] })
    gate.clock.advance(COOLDOWN)
    assert.equal((await idp.call(await idp.token({ kid: 'k2' }, next))).status, 200)
    const r = await idp.call(cached)
    assert.equal(r.status, 401, r.text)
    assert.equal(r.json.code, 'invalid_token')
  })

  it('right after a rotation refetch, an old-key token issued just before it gets 401 (the key was withdrawn), never 503', async () => {
    const idp = await remote()
    const next = idp.successor()
    gate.clock.advance(COOLDOWN)
    // Signed with the old key a moment before the provider rotates: iat within the clock
    // tolerance of the refetch below, so its iat alone cannot tell it is older.
    const old = await idp.token()
    idp.host.setJwks({ keys: [next.publicJwk] })
    assert.equal((await idp.call(await idp.token({ kid: 'k2' }, next))).status, 200)
    for (let step = 0; step < 3; step++) {
      const r = await idp.call(old)
      assert.equal(r.status, 401, r.text)
      assert.equal(r.json.code, 'invalid_token')
      assert.equal(r.headers['retry-after'], undefined)
      assert.equal(r.json.detail, 'the signing key has been withdrawn by its issuer')
      gate.clock.advance(COOLDOWN / 4)
    }
    // The precise reason is in the request's log line (docs/errors.md).
    const line = lastRequestLine(401)
    assert.equal(line.code, 'invalid_token')
    assert.equal(line.reason, 'withdrawn_key')
  })

  it("a 401 invalid_token's log line carries the precise reason; the response a client-safe detail", async () => {
    const idp = await remote()
    const token = await idp.token()
    const [head, payload] = token.split('.')
    const forged = `${head}.${payload}.${'A'.repeat(86)}`
    const r = await idp.call(forged)
    assert.equal(r.status, 401, r.text)
    assert.equal(r.json.detail, 'the signature is not valid')
    const line = lastRequestLine(401)
    assert.equal(line.reqId, r.json.requestId)
    assert.equal(line.reason, 'bad_signature')
  })

  it('a rotation announced ahead (new key published before use) keeps every token of either key valid', async () => {
    const idp = await remote()
    const next = idp.successor()
    idp.host.setJwks({ keys: [idp.issuer.publicJwk, next.publicJwk] })
    const statuses: number[] = []
    // The provider starts signing with k2 some time after publishing it (here: past the
    // cooldown of the last fetch); old-key tokens keep working meanwhile.
    gate.clock.advance(COOLDOWN)
    for (let step = 0; step < 6; step++) {
      gate.clock.advance(COOLDOWN / 2)
      statuses.push((await idp.call(await idp.token())).status)
      statuses.push((await idp.call(await idp.token({ kid: 'k2' }, next))).status)
    }
    assert.deepEqual(statuses, Array(12).fill(200))
  })

  // Formerly a known issue: a token signed with a key published less than the cooldown after
  // tokengate's last JWKS fetch got 401 until the cooldown ended, and a made-up kid every
  // 30 s kept that window open. Now an unknown kid during the cooldown is 401 only when the
  // keys held are newer than the token's iat; otherwise 503 with Retry-After = the rest of
  // the cooldown, and the retry meets the next refetch (src/core/jwks.ts, `resolve`).
  it('a token with a newly published kid arriving within the cooldown of the last fetch gets 503 with Retry-After, then 200 (never 401)', async () => {
    const idp = await remote()
    const next = idp.successor()
    // Someone arms the cooldown with a made-up kid: that refetch is the last one for 30 s.
    gate.clock.advance(COOLDOWN)
    const armed = await idp.call(await idp.token({ kid: 'made-up' }))
    assert.equal(armed.status, 401, armed.text)
    // The provider publishes k2 and signs with it at once, within that cooldown.
    idp.host.setJwks({ keys: [idp.issuer.publicJwk, next.publicJwk] })
    gate.clock.advance(COOLDOWN / 2)
    const token = await idp.token({ kid: 'k2' }, next)
    const r = await idp.call(token)
    assertUnavailable(r)
    assert.ok(Number(r.headers['retry-after']) <= COOLDOWN / 2000, 'the rest of the cooldown')
    // The attacker spends the next refetch just before the client retries: it learns k2 too.
    gate.clock.advance(COOLDOWN / 2)
    const again = await idp.call(await idp.token({ kid: 'made-up-2' }))
    assert.equal(again.status, 401, again.text)
    const retried = await idp.call(token)
    assert.equal(retried.status, 200, retried.text)
  })

  it('JWKS failing: cached keys keep verifying past the max age for up to the staleness bound, one refetch per cooldown', async () => {
    const idp = await remote()
    idp.host.setMode('error')
    gate.clock.advance(MAX_AGE)
    const before = idp.host.requests
    assert.equal((await idp.call(await idp.token())).status, 200)
    assert.equal(idp.host.requests - before, 1, 'one refetch attempt')
    for (let i = 0; i < 5; i++) assert.equal((await idp.call(await idp.token())).status, 200)
    assert.equal(idp.host.requests - before, 1, 'no refetch during the cooldown')
    const { status, checks } = await readiness()
    assert.equal(status, 'degraded')
    assert.ok(checks.issuers.stale.includes(idp.issuer.config.issuer))
    gate.clock.advance(STALE - COOLDOWN)
    assert.equal((await idp.call(await idp.token())).status, 200, 'still within staleness')
  })

  it('beyond the staleness bound: 503 unavailable with Retry-After (never 401, never 500), and recovery is picked up', async () => {
    const idp = await remote()
    idp.host.setMode('error')
    gate.clock.advance(MAX_AGE + STALE)
    for (let i = 0; i < 3; i++) assertUnavailable(await idp.call(await idp.token()))
    const { status, checks } = await readiness()
    assert.equal(status, 'degraded')
    assert.ok(checks.issuers.notLoaded.includes(idp.issuer.config.issuer))
    idp.host.setMode('ok')
    gate.clock.advance(COOLDOWN)
    assert.equal((await idp.call(await idp.token())).status, 200)
    assert.ok(!(await readiness()).checks.issuers.notLoaded.includes(idp.issuer.config.issuer))
  })

  it('keys never loaded: 503 unavailable with Retry-After, /readyz stays 200 and lists the issuer', async () => {
    const idp = await remote({ mode: 'error' })
    assertUnavailable(await idp.call(await idp.token()))
    const ready = await readiness()
    assert.equal(ready.status, 'degraded')
    assert.ok(ready.checks.issuers.notLoaded.includes(idp.issuer.config.issuer))
  })

  it('a JWKS endpoint that never answers is bounded by the fetch timeout: 503, not a hung request', async () => {
    const idp = await remote({ mode: 'error' })
    await eventually(async () => idp.host.requests >= 1, 5000, 'the failed first load')
    idp.host.setMode('hang')
    gate.clock.advance(COOLDOWN)
    const started = performance.now()
    assertUnavailable(await idp.call(await idp.token()))
    const elapsed = performance.now() - started
    assert.ok(elapsed < 3000, `took ${Math.round(elapsed)} ms`)
  })

  it("registering another issuer does not drop a failing issuer's stale keys", async () => {
    const idp = await remote()
    idp.host.setMode('error')
    gate.clock.advance(MAX_AGE + COOLDOWN)
    assert.equal((await idp.call(await idp.token())).status, 200)
    // The registry rebuilds its verifier on every issuer change; keys must survive it.
    const other = await remote()
    assert.equal((await other.call(await other.token())).status, 200)
    assert.equal((await idp.call(await idp.token())).status, 200)
  })

  it('one issuer down leaves PATs and the other issuers working', async () => {
    const down = await remote({ mode: 'error' })
    const up = await remote()
    const pat = JSON.parse(
      (await gate.cli('pat', 'issue', '--tenant', 'acme', '--subject', 'svc', '--json')).stdout,
    ) as { token: string }
    assertUnavailable(await down.call(await down.token()))
    assert.equal((await up.call(await up.token())).status, 200)
    assert.equal((await gate.request('/api/v1/me', bearer(pat.token))).status, 200)
  })
})
