/**
 * examples/forward-auth/nginx-lua.conf through the real nginx and Debian's Lua module: what
 * every example that keeps decisions promises (kept-decision-cases.ts: answered from the
 * shared dict, method, path and tenant in the key, a revocation refused within 1 s while a
 * client keeps calling, identity tokens never kept), and this example's own: the dict's keys
 * and entries hold a digest of the credential and never the credential (read back through a
 * location only this test's config has), the upstream gets only the X-Tenant-Id the entry was
 * decided for, each hit gets a request id of its own, an allow is kept to the millisecond
 * tokengate states counted from the ask (a steady key is not decided at each second's start,
 * a slow answer is not kept longer), a failed digest fails closed, and every refusal reaches
 * the client byte for byte as through nginx.conf.
 */
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { PROTECTED_PATH } from '../adapters/spec-table.ts'
import { rawRequest } from '../gateway/raw-request.ts'
import { TEST_SUBJECT, TEST_TENANT } from '../helpers/jwt.ts'
import { skipReason } from '../helpers/services.ts'
import { freePort, type ProxyProcess, type Stack, startNginx, startStack } from './harness.ts'
import {
  decisions,
  identityTokensNeverKept,
  keptDecisionCases,
  nginxKeepingDecisions,
  revokedWithinOneSecond,
} from './kept-decision-cases.ts'

type Header = readonly [string, string]

/**
 * A location only the test's config has: every key and entry of the shared dict, and the
 * seconds the entry has left (0: it never expires).
 */
const DUMP = `    location = /_test_dict {
        content_by_lua_block {
            local dict = ngx.shared.tokengate_decisions
            for _, key in ipairs(dict:get_keys(0)) do
                ngx.say(ngx.encode_base64(key), " ", ngx.encode_base64(dict:get(key) or ""),
                    " ", dict:ttl(key) or -1)
            end
        }
    }
`

function withDump(config: string): string {
  const at = config.indexOf('    location /api/v1 {')
  assert.ok(at > 0, 'nginx-lua.conf has location /api/v1')
  return `${config.slice(0, at)}${DUMP}${config.slice(at)}`
}

/** The dict's [key, entry, seconds left] triples, read through the test-only location. */
async function dictEntries(front: ProxyProcess): Promise<[string, string, number][]> {
  const text = (await rawRequest(front.url, '/_test_dict', [])).text
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [key, value, ttl] = line.split(' ')
      return [
        Buffer.from(key ?? '', 'base64').toString(),
        Buffer.from(value ?? '', 'base64').toString(),
        Number(ttl),
      ]
    })
}

/**
 * An older tokengate's answers (`X-Accel-Expires` only: the keep-ms header ignored) with
 * nginx's clock read in the last millisecond of every second (ngx.now() is in whole ms), where
 * an answer that may be kept until the end of that second leaves under 1 ms to keep it; and
 * each answer's keep-until second in a response header only this test has.
 */
function inLastMillisecond(config: string): string {
  const init = 'init_by_lua_block {\n'
  const ms = 'local ms = headers["x-tokengate-keep-ms"]'
  const keep = '            local ttl = keep_for(headers, asked_at)\n'
  for (const part of [init, ms, keep])
    assert.ok(config.includes(part), 'nginx-lua.conf changed shape')
  return config
    .replace(init, `${init}    ngx.now = function() return ngx.time() + 0.999 end\n`)
    .replace(ms, 'local ms = nil')
    .replace(keep, `${keep}            ngx.header["X-Test-Keep-Until"] = ttl and ngx.now() + ttl\n`)
}

/**
 * Every answer of tokengate read 300 ms after it came back (as if nginx were that busy), and
 * the keep time tokengate stated in a response header only this test has.
 */
function slowWayBack(config: string): string {
  const asked = '        local answer = capture("/_tokengate")\n'
  const token = '            local token = header(headers, "x-auth-token")\n'
  for (const part of [asked, token])
    assert.ok(config.includes(part), 'nginx-lua.conf changed shape')
  return config
    .replace(asked, `${asked}        ngx.sleep(0.3)\n`)
    .replace(
      token,
      `${token}            ngx.header["X-Test-Keep-Ms"] = header(headers, "x-tokengate-keep-ms")\n`,
    )
}

/** The base64 SHA-256 of an Authorization value, unpadded: the key's first field. */
const digestOf = (authorization: string) =>
  createHash('sha256').update(authorization).digest('base64').replace(/=+$/, '')

describe('nginx Lua decision cache', { skip: skipReason('nginx-lua') }, () => {
  const kept = nginxKeepingDecisions({ metrics: true }, { lua: true, edit: withDump })
  const { stack, front } = kept

  keptDecisionCases(kept, 'shared dict')

  test("the dict's keys and entries hold the credential's digest, never the credential", async () => {
    const origin = new URL(front.value.url).host
    const asked = [
      [`Bearer ${stack.value.tokens.pat}`, PROTECTED_PATH],
      [`Bearer ${stack.value.readerPat}`, '/api/v1/projects/1'],
    ] as const
    const expected = asked.map(
      ([authorization, path]) => `${digestOf(authorization)}||http://${origin}|GET|${path}`,
    )
    // Asked until both are kept (tokengate lets none be kept early in a second).
    let entries: [string, string, number][] = []
    for (let i = 0; i < 100; i++) {
      for (const [authorization, path] of asked) {
        const response = await rawRequest(front.value.url, path, [['Authorization', authorization]])
        assert.equal(response.status, 200)
      }
      entries = await dictEntries(front.value)
      if (expected.every((key) => entries.some(([kept]) => kept === key))) break
      await sleep(20)
    }
    const credentials = [...Object.values(stack.value.tokens), stack.value.readerPat]
    for (const [key, entry] of entries) {
      // The messages never quote a key or an entry: it would print the credential.
      for (const credential of credentials) {
        assert.ok(!key.includes(credential), 'a key holds a credential')
        assert.ok(!entry.includes(credential), 'an entry holds a credential')
      }
      assert.ok(!key.includes('Bearer') && !entry.includes('Bearer'), 'an Authorization value')
    }
    for (const key of expected) {
      assert.ok(
        entries.some(([kept]) => kept === key),
        `no key is the digest, tenant, origin, method, URI (${entries.length} keys)`,
      )
    }
  })

  test('hostile headers on a kept decision: spoofed identity stripped, a second X-Tenant-Id never passed', async () => {
    const jwt: Header = ['Authorization', `Bearer ${stack.value.tokens.jwt}`]
    const spoofs: Header[] = [
      ['X-Auth-Tenant', 'tenant-b'],
      ['X-Auth-Subject', 'root'],
      ['X-Auth-Permissions', 'admin:all'],
      ['X-Auth-Token', 'forged'],
      ['X-HTTP-Method-Override', 'DELETE'],
      ['Cookie', 'theme=dark; __Host-tokengate-admin=s3cr3t'],
    ]
    // Decided by tokengate, a second X-Tenant-Id is refused (401); answered from the dict,
    // nginx passes the first value only. Asked until one is answered from the dict.
    let hits = 0
    for (let i = 0; i < 100 && hits === 0; i++) {
      assert.equal(
        (await rawRequest(front.value.url, PROTECTED_PATH, [jwt, ['X-Tenant-Id', TEST_TENANT]]))
          .status,
        200,
      )
      const seenBefore = stack.value.upstream.seen.length
      const hostile = await rawRequest(front.value.url, PROTECTED_PATH, [
        jwt,
        ['X-Tenant-Id', TEST_TENANT],
        ['X-Tenant-Id', 'tenant-b'],
        ...spoofs,
      ])
      if (hostile.status === 401) {
        await sleep(20)
        continue
      }
      assert.equal(hostile.status, 200)
      const seen = stack.value.upstream.seen[seenBefore]
      assert.ok(seen, 'the upstream got the request')
      assert.equal(seen.headers['x-tenant-id'], TEST_TENANT)
      assert.equal(seen.headers['x-auth-tenant'], TEST_TENANT)
      assert.equal(seen.headers['x-auth-subject'], TEST_SUBJECT)
      assert.notEqual(seen.headers['x-auth-permissions'], 'admin:all')
      assert.equal(seen.headers['x-auth-token'], undefined)
      assert.equal(seen.headers['x-http-method-override'], undefined)
      assert.equal(seen.headers.authorization, undefined)
      assert.equal(seen.headers.cookie, 'theme=dark')
      hits++
    }
    assert.equal(hits, 1, 'never answered from the dict')
  })

  test('each kept allow names its own request: a new id of $request_id kind, the same upstream and to the caller', async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    // nginx's kind (16 random bytes in hex) on a hit; tokengate's own ids have a dash.
    const ofNginx = /^[0-9a-f]{32}$/
    const ofTokengate = /^[A-Za-z0-9]+-[0-9a-z]+$/
    const kept = new Set<string>()
    // More hits than one batch of ids (256): the batch is refilled on the way.
    for (let i = 0; i < 2_000 && kept.size <= 300; i++) {
      const seenBefore = stack.value.upstream.seen.length
      const response = await rawRequest(front.value.url, '/api/v1/projects/1', [
        reader,
        ['X-Request-Id', 'caller-chosen'],
      ])
      assert.equal(response.status, 200)
      const id = String(response.headers['x-request-id'])
      assert.equal(stack.value.upstream.seen[seenBefore]?.headers['x-request-id'], id)
      if (ofTokengate.test(id)) continue
      assert.match(id, ofNginx)
      assert.ok(!kept.has(id), `a kept allow answered with an id given before (${kept.size} hits)`)
      kept.add(id)
    }
    assert.ok(kept.size > 300, `${kept.size} hits`)
  })

  test('a second Authorization never rides on a kept decision', async () => {
    const reader = `Bearer ${stack.value.readerPat}`
    assert.equal(
      (await rawRequest(front.value.url, '/api/v1/projects/1', [['Authorization', reader]])).status,
      200,
    )
    const twice = await rawRequest(front.value.url, '/api/v1/projects/1', [
      ['Authorization', reader],
      ['Authorization', `Bearer ${stack.value.tokens.pat}`],
    ])
    assert.ok(twice.status >= 400, `answered ${twice.status}`)
  })

  test('a steady key is not decided again at each second boundary: kept to the ms, not to the second', async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    // Requests sent in the first 40 ms of a second: tokengate states X-Accel-Expires `0`
    // until a read of that second (>= 50 ms in), so kept to the second all of these are decided.
    let early = 0
    let earlyDecided = 0
    let served = 0
    const decidedBefore = await decisions(stack.value)
    const seconds = new Set<number>()
    while (seconds.size < 4 || early < 20) {
      assert.ok(served < 20_000, `${served} requests, ${early} early in a second`)
      const sentAt = Date.now()
      const response = await rawRequest(front.value.url, '/api/v1/projects/7', [reader])
      assert.equal(response.status, 200)
      served++
      if (sentAt % 1000 >= 40) continue
      seconds.add(Math.floor(sentAt / 1000))
      early++
      // A hit's id is nginx's kind (32 hex); tokengate's has a dash.
      if (!/^[0-9a-f]{32}$/.test(String(response.headers['x-request-id']))) earlyDecided++
    }
    const decided = (await decisions(stack.value)) - decidedBefore
    console.log(
      `steady key: ${served} requests, ${decided} decided; early in ${seconds.size} seconds: ${early}, ${earlyDecided} decided`,
    )
    // Kept to the ms, an entry ends 0.45-0.95 s after its decision, wherever in the second.
    assert.ok(earlyDecided * 2 <= early, `${earlyDecided} of ${early} early requests decided`)
    assert.ok(decided * 10 <= served, `${decided} decisions for ${served} requests`)
    for (const [, , ttl] of await dictEntries(front.value)) {
      // Never longer than tokengate states (under 1 s), never without expiry (0).
      assert.ok(ttl > 0 && ttl <= 1, `an entry kept ${ttl} s`)
    }
  })

  revokedWithinOneSecond(kept)
})

describe("nginx Lua decision cache, an older tokengate's second, answered in its last millisecond", {
  skip: skipReason('nginx-lua'),
}, () => {
  const { stack, front } = nginxKeepingDecisions(
    { metrics: true },
    { lua: true, edit: (config) => withDump(inLastMillisecond(config)) },
  )

  test('an allow that may be kept until the end of this second is gone after it (never an entry without expiry)', async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    // Asked until tokengate lets an answer be kept (it lets none early in a second).
    let keepUntil: number | undefined
    for (let i = 0; i < 200 && keepUntil === undefined; i++) {
      const response = await rawRequest(front.value.url, '/api/v1/projects/1', [reader])
      assert.equal(response.status, 200)
      const stated = response.headers['x-test-keep-until']
      if (stated !== undefined) keepUntil = Number(stated)
      else await sleep(10)
    }
    assert.ok(keepUntil !== undefined, 'tokengate never let an answer be kept')
    for (const [, , ttl] of await dictEntries(front.value)) {
      // shdict keeps whole milliseconds, and 0 means forever.
      assert.ok(ttl > 0, `an entry without expiry (ttl ${ttl})`)
    }
    while (Date.now() < keepUntil * 1000) await sleep(50)
    const before = await decisions(stack.value)
    assert.equal((await rawRequest(front.value.url, '/api/v1/projects/1', [reader])).status, 200)
    assert.equal(
      (await decisions(stack.value)) - before,
      1,
      'answered from the dict after its second',
    )
  })
})

describe('nginx Lua decision cache, an answer slow to come back', {
  skip: skipReason('nginx-lua'),
}, () => {
  const { stack, front } = nginxKeepingDecisions(
    {},
    { lua: true, edit: (config) => withDump(slowWayBack(config)) },
  )

  test('an allow is kept no longer than tokengate stated counted from the ask: a slow way back never lengthens it', async () => {
    const reader: Header = ['Authorization', `Bearer ${stack.value.readerPat}`]
    const path = '/api/v1/projects/9'
    for (let i = 0; i < 200; i++) {
      const response = await rawRequest(front.value.url, path, [reader])
      assert.equal(response.status, 200)
      // Only a decided request has the header; one with little left is not kept at all.
      const stated = Number(response.headers['x-test-keep-ms'] ?? 0)
      if (stated < 400) {
        await sleep(20)
        continue
      }
      const kept = (await dictEntries(front.value)).find(([key]) => key.endsWith(`|GET|${path}`))
      assert.ok(kept, 'the allow was not kept')
      // Asked, then 300 ms more before the dict's count starts: at most stated - 300 ms left.
      assert.ok(kept[2] * 1000 <= stated - 300 + 1, `kept ${kept[2]} s of the ${stated} ms stated`)
      return
    }
    assert.fail('tokengate never stated 400 ms or more')
  })
})

describe('nginx Lua decision cache with identity tokens', { skip: skipReason('nginx-lua') }, () => {
  identityTokensNeverKept(
    nginxKeepingDecisions({ identityToken: true }, { lua: true, edit: withDump }),
    async (front) => assert.deepEqual(await dictEntries(front), [], 'nothing was kept'),
  )
})

/**
 * One request on its own connection; the response exactly as nginx wrote it, with what
 * differs per request (Date, the request id wherever it appears, RateLimit's remaining count)
 * replaced by placeholders.
 */
async function rawAnswer(url: string, method: string, path: string, headers: readonly Header[]) {
  const { port } = new URL(url)
  const head = [
    `${method} ${path} HTTP/1.1`,
    `Host: 127.0.0.1`,
    'Connection: close',
    ...headers.map(([name, value]) => `${name}: ${value}`),
  ].join('\r\n')
  const bytes = await new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1')
    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')))
    socket.on('error', reject)
    socket.write(`${head}\r\n\r\n`)
  })
  const id = /\r\nX-Request-Id: ([^\r]*)\r\n/i.exec(bytes)?.[1]
  const normal = (id ? bytes.replaceAll(id, '<id>') : bytes)
    .replace(/\r\nDate: [^\r]*/, '\r\nDate: <date>')
    .replace(/;r=\d+;/g, ';r=<n>;')
  // Content-Length follows the body, whose request id may differ in length.
  return normal.replace(/\r\nContent-Length: \d+/i, '\r\nContent-Length: <n>')
}

describe('nginx Lua decision cache: refusals as nginx.conf gives them', {
  skip: skipReason('nginx-lua'),
}, () => {
  let stack: Stack
  let shipped: ProxyProcess
  let lua: ProxyProcess
  before(async () => {
    stack = await startStack({ proxy: 'nginx' })
    const ports = { decision: stack.decisionPort, upstream: stack.upstream.port }
    shipped = await startNginx(ports)
    lua = await startNginx(ports, { lua: true })
  })
  after(async () => {
    await lua?.stop()
    await shipped?.stop()
    await stack?.close()
  })

  const cases = (): [string, string, string, Header[]][] => [
    ['no credential', 'GET', PROTECTED_PATH, []],
    ['a garbage token', 'GET', PROTECTED_PATH, [['Authorization', 'Bearer nope']]],
    [
      'a JWT of an unknown issuer',
      'GET',
      PROTECTED_PATH,
      [['Authorization', `Bearer ${stack.unreachableIssuerJwt}`]],
    ],
    [
      'a permission the token lacks',
      'DELETE',
      '/api/v1/projects/1',
      [['Authorization', `Bearer ${stack.readerPat}`]],
    ],
    [
      'a deny rule',
      'DELETE',
      '/api/v1/internal/secret',
      [['Authorization', `Bearer ${stack.tokens.pat}`]],
    ],
    [
      'another tenant header',
      'GET',
      '/api/v1/projects/1',
      [
        ['Authorization', `Bearer ${stack.readerPat}`],
        ['X-Tenant-Id', 'tenant-b'],
      ],
    ],
    [
      'two X-Tenant-Id',
      'GET',
      PROTECTED_PATH,
      [
        ['Authorization', `Bearer ${stack.tokens.jwt}`],
        ['X-Tenant-Id', TEST_TENANT],
        ['X-Tenant-Id', 'tenant-b'],
      ],
    ],
    [
      'two Authorization',
      'GET',
      PROTECTED_PATH,
      [
        ['Authorization', `Bearer ${stack.tokens.pat}`],
        ['Authorization', 'Bearer nope'],
      ],
    ],
  ]

  test('every refusal is byte-identical to the shipped nginx.conf (status, headers, body)', async () => {
    for (const [name, method, path, headers] of cases()) {
      const expected = await rawAnswer(shipped.url, method, path, headers)
      assert.match(expected, /^HTTP\/1\.1 [45]\d\d /, `${name}: nginx.conf refused it`)
      const got = await rawAnswer(lua.url, method, path, headers)
      assert.equal(got, expected, name)
    }
  })

  test('tokengate unreachable: refused as nginx.conf refuses it (fail closed, 503)', async () => {
    const dead = await freePort()
    const ports = { decision: dead, upstream: stack.upstream.port }
    const [deadShipped, deadLua] = [await startNginx(ports), await startNginx(ports, { lua: true })]
    try {
      const token: Header[] = [['Authorization', `Bearer ${stack.tokens.pat}`]]
      const expected = await rawAnswer(deadShipped.url, 'GET', PROTECTED_PATH, token)
      assert.match(expected, /^HTTP\/1\.1 503 /)
      const got = await rawAnswer(deadLua.url, 'GET', PROTECTED_PATH, token)
      // The body names nginx's own request id, different per nginx.
      const id = (text: string) => text.replace(/"requestId":"[0-9a-f]{32}"/, '"requestId":"<id>"')
      assert.equal(id(got), id(expected))
    } finally {
      await deadLua.stop()
      await deadShipped.stop()
    }
  })

  test('a digest OpenSSL fails to make: refused as tokengate unreachable (fail closed, 503), never a key', async () => {
    const ports = { decision: stack.decisionPort, upstream: stack.upstream.port }
    const final = 'C.EVP_DigestFinal_ex(hashing, digest, nil) ~= 1'
    const failing = await startNginx(ports, {
      lua: true,
      edit: (config) => {
        assert.ok(config.includes(final), 'nginx-lua.conf changed shape')
        // The digest is made, then reported failed: its bytes are left in the buffer.
        return config.replace(final, final.replace('~= 1', '~= 0'))
      },
    })
    try {
      const token: Header[] = [['Authorization', `Bearer ${stack.readerPat}`]]
      const seenBefore = stack.upstream.seen.length
      for (let i = 0; i < 3; i++) {
        const got = await rawAnswer(failing.url, 'GET', '/api/v1/projects/1', token)
        assert.match(got, /^HTTP\/1\.1 503 /)
        assert.match(got, /"code":"unavailable"/)
      }
      assert.equal(stack.upstream.seen.length, seenBefore, 'the upstream got a request')
    } finally {
      await failing.stop()
    }
  })
})

describe('nginx-lua.conf and nginx.conf', () => {
  const examples = new URL('../../examples/forward-auth/', import.meta.url)
  const read = (file: string) => readFileSync(new URL(file, examples), 'utf8')
  /** From the first line starting with `from` up to the one starting with `to` (or the end). */
  const part = (text: string, from: string, to?: string) => {
    const start = text.indexOf(from)
    assert.ok(start >= 0, `no ${from}`)
    return to === undefined ? text.slice(start) : text.slice(start, text.indexOf(to, start))
  }

  test('share the upstreams, the maps, the decision location and the refusal locations word for word', () => {
    const [shipped, lua] = [read('nginx.conf'), read('nginx-lua.conf')]
    const pairs: [string, string | undefined][] = [
      ['upstream tokengate_decision {', '# Certificate-bound tokens'],
      ['# Certificate-bound tokens', '# Decision cache (optional'],
      ['    location @tokengate_preflight {', undefined],
      [
        '        proxy_http_version 1.1;\n        proxy_set_header Connection "";\n        proxy_set_header Host',
        '        # Method-override',
      ],
    ]
    for (const [from, to] of pairs) {
      const end = to === '# Decision cache (optional' ? '# Allows only' : to
      assert.equal(part(lua, from, end).trimEnd(), part(shipped, from, to).trimEnd(), from)
    }
    const askShipped = part(shipped, '    location = /_tokengate {', '        # Decision cache:')
    assert.ok(part(lua, '    location = /_tokengate {').startsWith(askShipped), '/_tokengate')
  })
})
