import assert from 'node:assert/strict'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

describe('tokengate issuer', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  const file = (name: string, content: string | Buffer) => {
    const path = join(dataDir, name)
    writeFileSync(path, content)
    return path
  }
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
  const ecPem = ec.publicKey.export({ type: 'spki', format: 'pem' }).toString()
  const ecJwk = { ...ec.publicKey.export({ format: 'jwk' }), kid: 'ec-1' }
  const rsaJwk = { ...rsa.publicKey.export({ format: 'jwk' }), kid: 'rsa-1' }
  const secret = randomBytes(32)
  const base = (iss: string) => ['issuer', 'add', '--issuer', iss, '--audience', 'api']
  after(() => data.cleanup())
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], { dataDir })).code, 0)
  })

  it('issuer add with a PEM file stores the SPKI key bound to its algorithm', async () => {
    const pem = file('ec.pem', ecPem)
    const result = await cli(
      [
        ...base('https://pem.example'),
        '--audience',
        'api2',
        '--pem-file',
        pem,
        '--algorithm',
        'ES256',
        '--tenant',
        'acme',
      ],
      { dataDir },
    )
    assert.equal(result.code, 0, result.stderr)
    assert.match(result.stdout, /Added issuer https:\/\/pem.example\./)
    const stored = await withDataStore(dataDir, async (store) =>
      (await store.listIssuers()).find((i) => i.issuer === 'https://pem.example'),
    )
    assert.deepEqual(stored?.audiences, ['api', 'api2'])
    assert.deepEqual(stored?.keySource, { kind: 'pem', pem: ecPem, algorithm: 'ES256' })
    assert.deepEqual(stored?.algorithms, ['ES256'])
    assert.deepEqual(stored?.tenant, { fixed: 'acme' })
  })

  it('issuer add with a JWKS file binds every key to an algorithm, inferring it when unambiguous', async () => {
    const jwks = file('keys.json', JSON.stringify({ keys: [ecJwk, { ...rsaJwk, alg: 'PS256' }] }))
    const added = await cliJson(
      [
        ...base('https://jwks.example'),
        '--jwks-file',
        jwks,
        '--tenant-claim',
        'org',
        '--permissions-claim',
        'scope',
      ],
      { dataDir },
    )
    assert.equal(added.replaced, false)
    const stored = await withDataStore(dataDir, async (store) =>
      (await store.listIssuers()).find((i) => i.issuer === 'https://jwks.example'),
    )
    assert.equal(stored?.keySource.kind, 'jwks')
    const keys = stored?.keySource.kind === 'jwks' ? stored.keySource.jwks.keys : []
    assert.deepEqual(
      keys.map((k) => [k.kid, k.alg]),
      [
        ['ec-1', 'ES256'],
        ['rsa-1', 'PS256'],
      ],
    )
    assert.deepEqual(stored?.algorithms, ['ES256', 'PS256'])
    assert.deepEqual(stored?.tenant, { claim: 'org' })
    assert.equal(stored?.permissionsClaim, 'scope')
  })

  it('adding the same issuer again replaces it', async () => {
    const added = await cliJson(
      [...base('https://jwks.example'), '--jwks-url', 'https://jwks.example/.well-known/jwks.json'],
      { dataDir },
    )
    assert.equal(added.replaced, true)
    assert.deepEqual(added.keySource, {
      kind: 'jwks_url',
      url: 'https://jwks.example/.well-known/jwks.json',
    })
  })

  it('a JWKS URL must be https, except on localhost', async () => {
    const plain = await cli([...base('i1'), '--jwks-url', 'http://idp.example/jwks'], { dataDir })
    assert.equal(plain.code, 2)
    assert.match(plain.stderr, /--jwks-url: JWKS URL must use https/)
    const notUrl = await cli([...base('i1'), '--jwks-url', 'idp.example/jwks'], { dataDir })
    assert.equal(notUrl.code, 2)
    const local = await cli([...base('local'), '--jwks-url', 'http://127.0.0.1:9999/jwks'], {
      dataDir,
    })
    assert.equal(local.code, 0, local.stderr)
  })

  it('exactly one key source is required', async () => {
    const none = await cli(base('i2'), { dataDir })
    assert.equal(none.code, 2)
    assert.match(none.stderr, /expected exactly one key source: .*\(got none\)/)
    const two = await cli(
      [
        ...base('i2'),
        '--jwks-url',
        'https://a.example/jwks',
        '--pem-file',
        'x.pem',
        '--algorithm',
        'ES256',
      ],
      { dataDir },
    )
    assert.equal(two.code, 2)
    assert.match(two.stderr, /\(got --jwks-url and --pem-file\)/)
  })

  it('PEM validation: algorithm required and matching, public keys only, parseable', async () => {
    const pem = file('ec2.pem', ecPem)
    const noAlg = await cli([...base('i3'), '--pem-file', pem], { dataDir })
    assert.equal(noAlg.code, 2)
    assert.match(noAlg.stderr, /missing --algorithm/)
    const wrongAlg = await cli([...base('i3'), '--pem-file', pem, '--algorithm', 'RS256'], {
      dataDir,
    })
    assert.equal(wrongAlg.code, 2)
    assert.match(wrongAlg.stderr, /ec2\.pem: a ec key cannot be used with RS256/)
    const privatePem = file('private.pem', ec.privateKey.export({ type: 'pkcs8', format: 'pem' }))
    const priv = await cli([...base('i3'), '--pem-file', privatePem, '--algorithm', 'ES256'], {
      dataDir,
    })
    assert.equal(priv.code, 2)
    assert.match(priv.stderr, /this is a private key/)
    const garbage = file(
      'garbage.pem',
      '-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n',
    )
    const bad = await cli([...base('i3'), '--pem-file', garbage, '--algorithm', 'ES256'], {
      dataDir,
    })
    assert.equal(bad.code, 2)
    assert.match(bad.stderr, /does not parse as a PEM public key/)
    const missing = await cli(
      [...base('i3'), '--pem-file', join(dataDir, 'nope.pem'), '--algorithm', 'ES256'],
      { dataDir },
    )
    assert.equal(missing.code, 2)
    assert.match(missing.stderr, /cannot read the file \(ENOENT\)/)
  })

  it("PEM keys follow the core's key rules: an rsa-pss key for PS256 is refused (the server would refuse it at start)", async () => {
    const pss = generateKeyPairSync('rsa-pss', { modulusLength: 2048 })
    const pem = file('pss.pem', pss.publicKey.export({ type: 'spki', format: 'pem' }))
    const refused = await cli([...base('pss'), '--pem-file', pem, '--algorithm', 'PS256'], {
      dataDir,
    })
    assert.equal(refused.code, 2, refused.stdout)
    assert.match(refused.stderr, /--pem-file .*pss\.pem: a rsa-pss key cannot be used with PS256/)
    const stored = await withDataStore(dataDir, (store) => store.listIssuers())
    assert.equal(
      stored.some((i) => i.issuer === 'pss'),
      false,
    )
    const weak = generateKeyPairSync('rsa', { modulusLength: 1024 })
    const weakPem = file('weak.pem', weak.publicKey.export({ type: 'spki', format: 'pem' }))
    const short = await cli([...base('pss'), '--pem-file', weakPem, '--algorithm', 'RS256'], {
      dataDir,
    })
    assert.equal(short.code, 2)
    assert.match(short.stderr, /RSA keys must have at least 2048 bits/)
  })

  it('a JWKS file with an RSA key without alg: bound under --algorithms, or RS256 and PS256 by default', async () => {
    const jwks = file('rsa-no-alg.json', JSON.stringify({ keys: [rsaJwk, ecJwk] }))
    const stored = async (iss: string) =>
      withDataStore(dataDir, async (store) =>
        (await store.listIssuers()).find((i) => i.issuer === iss),
      )
    assert.equal(
      (await cli([...base('https://rsa.example'), '--jwks-file', jwks], { dataDir })).code,
      0,
    )
    const plain = await stored('https://rsa.example')
    assert.deepEqual(plain?.algorithms, ['RS256', 'PS256', 'ES256'])
    const keys = plain?.keySource.kind === 'jwks' ? plain.keySource.jwks.keys : []
    assert.deepEqual(
      keys.map((k) => [k.kid, k.alg]),
      [
        ['rsa-1', undefined],
        ['ec-1', 'ES256'],
      ],
    )
    const listed = await cli(
      [...base('https://rsa2.example'), '--jwks-file', jwks, '--algorithms', 'PS384,ES256'],
      { dataDir },
    )
    assert.equal(listed.code, 0, listed.stderr)
    const pinned = await stored('https://rsa2.example')
    assert.deepEqual(pinned?.algorithms, ['PS384', 'ES256'])
    const pinnedKeys = pinned?.keySource.kind === 'jwks' ? pinned.keySource.jwks.keys : []
    assert.deepEqual(
      pinnedKeys.map((k) => k.alg),
      ['PS384', 'ES256'],
    )
    for (const iss of ['https://rsa.example', 'https://rsa2.example']) {
      assert.equal((await cli(['issuer', 'remove', iss], { dataDir })).code, 0)
    }
  })

  it('JWKS validation: JSON, a keys array, unambiguous algorithms, no private or symmetric keys', async () => {
    const cases: [string, RegExp, string[]?][] = [
      ['{not json', /not valid JSON/],
      ['{"keys": []}', /expected a JSON Web Key Set/],
      [
        JSON.stringify({ keys: [rsaJwk] }),
        /key 1 \(kid rsa-1\): none of the algorithms .* is on the issuer's allow-list/,
        ['--algorithms', 'ES256'],
      ],
      [
        JSON.stringify({ keys: [{ ...rsaJwk, alg: 'RS512' }] }),
        /RS512 is not on/,
        ['--algorithms', 'RS256'],
      ],
      [
        JSON.stringify({ keys: [ec.privateKey.export({ format: 'jwk' })] }),
        /private key material is not accepted/,
      ],
      [
        JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] }),
        /symmetric \(oct\) keys are not accepted/,
      ],
      [JSON.stringify({ keys: [{ ...ecJwk, alg: 'RS256' }] }), /cannot be used with RS256/],
      [JSON.stringify({ keys: [{ ...ecJwk, alg: 'none' }] }), /"alg" none is not accepted/],
    ]
    for (const [content, message, extra = []] of cases) {
      const result = await cli(
        [...base('i4'), '--jwks-file', file('bad.json', content), ...extra],
        { dataDir },
      )
      assert.equal(result.code, 2, content)
      assert.match(result.stderr, message)
    }
  })

  it('the algorithm allowlist refuses none, and HMAC unless the key is a shared secret', async () => {
    const none = await cli(
      [...base('i5'), '--jwks-url', 'https://a.example/j', '--algorithms', 'RS256,none'],
      { dataDir },
    )
    assert.equal(none.code, 2)
    assert.match(none.stderr, /--algorithms: 'none' is not allowed/)
    const hs = await cli(
      [...base('i5'), '--jwks-url', 'https://a.example/j', '--algorithms', 'HS256'],
      { dataDir },
    )
    assert.equal(hs.code, 2)
    const onJwks = await cli(
      [...base('i5'), '--jwks-url', 'https://a.example/j', '--algorithm', 'RS256'],
      { dataDir },
    )
    assert.equal(onJwks.code, 2)
    assert.match(onJwks.stderr, /--algorithm applies to --pem-file and --secret-file only/)
  })

  it('a shared secret needs an HMAC algorithm and enough bytes, and is never printed', async () => {
    const short = await cli(
      [...base('hs'), '--secret-file', file('short.key', 'too-short\n'), '--algorithm', 'HS256'],
      { dataDir },
    )
    assert.equal(short.code, 2)
    assert.match(
      short.stderr,
      /short\.key: an HS256 secret must be at least 32 bytes; this one has 9 bytes/,
    )
    const ok = await cli(
      [
        ...base('hs'),
        '--secret-file',
        file('good.key', secret),
        '--algorithm',
        'HS256',
        '--tenant',
        'acme',
      ],
      { dataDir },
    )
    assert.equal(ok.code, 0, ok.stderr)
    const listed = await cli(['issuer', 'list', '--json'], { dataDir })
    assert.equal(listed.stdout.includes(secret.toString('base64url')), false)
    assert.match(listed.stdout, /"kind": "secret"/)
  })

  it('--tenant and --tenant-claim together exit 2; an unknown fixed tenant exits 1', async () => {
    const both = await cli(
      [
        ...base('i6'),
        '--jwks-url',
        'https://a.example/j',
        '--tenant',
        'acme',
        '--tenant-claim',
        'org',
      ],
      { dataDir },
    )
    assert.equal(both.code, 2)
    assert.match(both.stderr, /either --tenant .* or --tenant-claim/)
    const unknown = await cli(
      [...base('i6'), '--jwks-url', 'https://a.example/j', '--tenant', 'nobody'],
      { dataDir },
    )
    assert.equal(unknown.code, 1)
    assert.match(unknown.stderr, /no tenant nobody/)
    const noAudience = await cli(
      ['issuer', 'add', '--issuer', 'x', '--jwks-url', 'https://a.example/j'],
      { dataDir },
    )
    assert.equal(noAudience.code, 2)
    assert.match(noAudience.stderr, /missing --audience/)
  })

  it('issuer list shows every issuer as a table and as JSON', async () => {
    const table = await cli(['issuer', 'list'], { dataDir })
    assert.equal(table.code, 0)
    assert.match(table.stdout, /^ISSUER\s+AUDIENCES\s+KEYS/)
    assert.match(table.stdout, /https:\/\/pem.example\s+api,api2\s+pem \(ES256\)\s+ES256\s+acme/)
    const { issuers } = await cliJson<{ issuers: { issuer: string }[] }>(['issuer', 'list'], {
      dataDir,
    })
    assert.deepEqual(issuers.map((i) => i.issuer).sort(), [
      'hs',
      'https://jwks.example',
      'https://pem.example',
      'local',
    ])
  })

  it('issuer remove deletes it; removing an unknown issuer exits 1', async () => {
    const removed = await cli(['issuer', 'remove', 'https://pem.example'], { dataDir })
    assert.equal(removed.code, 0, removed.stderr)
    const issuers = await withDataStore(dataDir, (store) => store.listIssuers())
    assert.equal(
      issuers.some((i) => i.issuer === 'https://pem.example'),
      false,
    )
    const again = await cli(['issuer', 'remove', 'https://pem.example'], { dataDir })
    assert.equal(again.code, 1)
    assert.match(again.stderr, /no issuer https:\/\/pem.example/)
  })

  it('adding and removing issuers is audited', async () => {
    const events = await withDataStore(dataDir, (store) => store.listAudit('acme', { limit: 50 }))
    const issuerEvents = events.items
      .filter((e) => e.details.issuer === 'https://pem.example')
      .map((e) => e.type)
    assert.deepEqual(issuerEvents.sort(), ['issuer.added', 'issuer.removed'])
    const hs = events.items.find((e) => e.details.issuer === 'hs')
    assert.equal(hs?.type, 'issuer.added')
    assert.equal(hs?.details.keySource, 'secret')
    assert.equal(JSON.stringify(hs).includes(secret.toString('base64url')), false)
  })
})
