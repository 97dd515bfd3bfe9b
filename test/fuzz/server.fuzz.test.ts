import assert from 'node:assert/strict'
import { Buffer } from 'node:buffer'
import https from 'node:https'
import { after, before, describe, it } from 'node:test'
import fc from 'fast-check'
import { type Gate, startGate } from '../attack/harness.ts'

/**
 * A bounded fuzz run over the running server (TLS, keep-alive, 32 requests in flight):
 * random methods, paths, Authorization and X-Tenant-Id values built from fragments of real
 * and broken tokens, and random extra headers. Seeded, so a failure replays.
 *
 * Asserts, for every answer: no 5xx (no dependency is down here), no token or token part
 * echoed in any header or the body; for the run: the server still answers, and its RSS
 * grew by less than a generous bound.
 */
const REQUESTS = Number(process.env.TOKENGATE_FUZZ_REQUESTS ?? 20_000)
const CONCURRENCY = 32
const SEED = Number(process.env.TOKENGATE_FUZZ_SEED ?? 20_261_122)

describe('fuzz: random requests against the running server', () => {
  let gate: Gate
  let pat: string
  let jwt: string
  let agent: https.Agent

  before(async () => {
    gate = await startGate({ log: { level: 'silent' } })
    assert.equal((await gate.cli('tenant', 'create', 'acme')).code, 0)
    const issued = await gate.cli('pat', 'issue', '--tenant', 'acme', '--subject', 'fuzz', '--json')
    pat = (JSON.parse(issued.stdout) as { token: string }).token
    jwt = (
      await gate.cli('jwt', 'mint', '--dev', '--tenant', 'acme', '--subject', 'fuzz')
    ).stdout.trim()
    agent = new https.Agent({ ca: gate.ca, keepAlive: true, maxSockets: CONCURRENCY })
  })

  after(async () => {
    agent?.destroy()
    await gate?.close()
  })

  it(`${REQUESTS} random requests: no 5xx, no token echoed, server alive, memory bounded`, async (t) => {
    const secrets = [pat, jwt, ...jwt.split('.').slice(1)]
    const token = fc.oneof(
      fc.constant(pat),
      fc.constant(jwt),
      fc.string({ maxLength: 60 }).map((s) => `pat_${s}`),
      fc.stringMatching(/^pat_[0-9A-Za-z]{38}$/),
      fc
        .tuple(fc.nat(pat.length), fc.string({ maxLength: 3 }))
        .map(([i, s]) => `${pat.slice(0, i)}${s}${pat.slice(i + 1)}`),
      fc
        .tuple(fc.nat(jwt.length), fc.string({ maxLength: 3 }))
        .map(([i, s]) => `${jwt.slice(0, i)}${s}${jwt.slice(i + 1)}`),
      fc
        .array(fc.base64String({ maxLength: 80 }), { maxLength: 6 })
        .map((parts) => parts.join('.')),
      fc.string({ maxLength: 200 }),
      fc.string({ unit: 'binary', maxLength: 100 }),
    )
    const authorization = fc.oneof(
      token.map((v) => `Bearer ${v}`),
      fc
        .tuple(
          fc.constantFrom('bearer', 'BEARER', 'Basic', 'Bearer ', 'Bearer\t', '', 'Token'),
          token,
        )
        .map(([s, v]) => `${s} ${v}`),
      token,
    )
    const tenant = fc.oneof(fc.constant('acme'), fc.constant('ACME'), fc.string({ maxLength: 40 }))
    const path = fc.oneof(
      fc.constantFrom(
        '/api/v1/me',
        '/api/v1/tokens',
        '/api/v1/audit-events',
        '/api/v1/openapi.json',
        '/readyz',
        '/healthz',
      ),
      fc
        .constantFrom(
          '/api/v1/tokens/',
          '/api/v1/tokens?limit=',
          '/api/v1/tokens?cursor=',
          '/api/v1/',
          '/api/v2/',
          '/',
        )
        .chain((p) => fc.string({ maxLength: 40 }).map((s) => `${p}${encodeURIComponent(s)}`)),
      fc.webPath().map((p) => `/api/v1${p}`),
    )
    const extra = fc.array(
      fc.tuple(
        fc.constantFrom(
          'Authorization',
          'X-Tenant-Id',
          'X-Request-Id',
          'X-Forwarded-For',
          'Content-Type',
          'Accept',
          'X-Junk',
        ),
        fc.string({ maxLength: 60 }),
      ),
      { maxLength: 3 },
    )
    const request = fc.record({
      method: fc.constantFrom(
        'GET',
        'GET',
        'GET',
        'POST',
        'DELETE',
        'PUT',
        'PATCH',
        'HEAD',
        'OPTIONS',
      ),
      path,
      authorization: fc.option(authorization, { nil: undefined }),
      tenant: fc.option(tenant, { nil: undefined }),
      extra,
    })
    const samples = fc.sample(request, { numRuns: REQUESTS, seed: SEED })

    const statuses = new Map<number, number>()
    const problems: string[] = []
    let clientRefused = 0
    globalThis.gc?.()
    const rssBefore = process.memoryUsage().rss
    const started = performance.now()

    const send = (sample: (typeof samples)[number]) =>
      new Promise<void>((resolve) => {
        const headers: string[] = ['Host', new URL(gate.url).host]
        if (sample.authorization !== undefined) headers.push('Authorization', sample.authorization)
        if (sample.tenant !== undefined) headers.push('X-Tenant-Id', sample.tenant)
        for (const [name, value] of sample.extra) headers.push(name, value)
        let req: ReturnType<typeof https.request>
        try {
          req = https.request(
            `${gate.url}${sample.path}`,
            { method: sample.method, agent, headers: headers as unknown as Record<string, string> },
            (res) => {
              const chunks: Buffer[] = []
              res.on('data', (chunk: Buffer) => chunks.push(chunk))
              res.on('end', () => {
                const status = res.statusCode ?? 0
                statuses.set(status, (statuses.get(status) ?? 0) + 1)
                const haystack = `${res.rawHeaders.join('\n')}\n${Buffer.concat(chunks).toString('utf8')}`
                if (status >= 500) problems.push(`${status} for ${JSON.stringify(sample)}`)
                for (const secret of secrets) {
                  if (haystack.includes(secret))
                    problems.push(`echoed a token for ${JSON.stringify(sample)}`)
                }
                resolve()
              })
            },
          )
        } catch {
          // Node's client refuses invalid header characters before sending: nothing to test.
          clientRefused++
          resolve()
          return
        }
        req.setTimeout(15_000, () => req.destroy(new Error('timeout')))
        req.on('error', (error) => {
          problems.push(`transport error ${(error as Error).message} for ${JSON.stringify(sample)}`)
          resolve()
        })
        req.end()
      })

    let next = 0
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < samples.length) {
          const sample = samples[next++] as (typeof samples)[number]
          await send(sample)
        }
      }),
    )
    const seconds = (performance.now() - started) / 1000
    globalThis.gc?.()
    const rssAfter = process.memoryUsage().rss
    const growthMb = (rssAfter - rssBefore) / 2 ** 20
    const summary = [...statuses.entries()].sort(([a], [b]) => a - b).map(([s, n]) => `${s}:${n}`)
    t.diagnostic(
      `${samples.length} requests (${clientRefused} refused by the client) in ${seconds.toFixed(1)} s ` +
        `(${Math.round((samples.length - clientRefused) / seconds)}/s); statuses ${summary.join(' ')}; ` +
        `RSS ${(rssBefore / 2 ** 20).toFixed(0)} → ${(rssAfter / 2 ** 20).toFixed(0)} MB`,
    )
    assert.deepEqual(problems.slice(0, 10), [])
    assert.ok(growthMb < 200, `RSS grew by ${growthMb.toFixed(0)} MB`)
    const alive = await gate.request('/api/v1/me', ['Authorization', `Bearer ${pat}`])
    assert.equal(alive.status, 200, 'the server still answers')
    assert.ok(
      (statuses.get(200) ?? 0) > 0 && (statuses.get(401) ?? 0) > 0,
      'the run exercised both outcomes',
    )
  })
})
