import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { startTestServer } from '../helpers/server.ts'

/** Scrapes the metrics listener and returns the text. */
async function scrape(url: string): Promise<string> {
  const response = await fetch(url)
  assert.equal(response.status, 200)
  assert.match(String(response.headers.get('content-type')), /^text\/plain; version=0\.0\.4/)
  return response.text()
}

/** The value of one sample line, e.g. `name{a="b"}`; undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

describe('/metrics on its own listener', () => {
  it('is off by default: no listener, and never a route on the API port', async (t) => {
    const server = await startTestServer()
    t.after(() => server.close())
    assert.equal(server.running.metricsUrl, undefined)
    const onApi = await server.request('/metrics')
    assert.equal(onApi.status, 404)
  })

  it('counts outcomes by code, times authentication, reports caches and 429s by policy', async (t) => {
    const server = await startTestServer({
      metrics: { enabled: true, port: 0 },
      rateLimit: { failedAuth: { max: 3, windowSec: 60 } },
    })
    t.after(() => server.close())
    const url = server.running.metricsUrl
    assert.match(String(url), /^http:\/\/127\.0\.0\.1:\d+\/metrics$/)
    assert.notEqual(new URL(String(url)).port, new URL(server.url).port, 'a separate listener')
    const token = server.running.devSeed?.demoPat as string

    for (let i = 0; i < 3; i++) {
      assert.equal(
        (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status,
        200,
      )
    }
    assert.equal((await server.request('/api/v1/me')).status, 401)
    assert.equal(
      (await server.request('/api/v1/nowhere', ['Authorization', `Bearer ${token}`])).status,
      404,
    )
    const statuses: number[] = []
    for (let i = 0; i < 5; i++) {
      const r = await server.request('/api/v1/me', ['Authorization', `Bearer pat_garbage${i}`])
      statuses.push(r.status)
    }
    assert.ok(statuses.includes(429), `failed-auth limit reached: ${statuses.join(',')}`)
    const limited = statuses.filter((s) => s === 429).length
    const invalid = statuses.filter((s) => s === 401).length

    const text = await scrape(String(url))
    assert.equal(sample(text, 'tokengate_http_requests_total{code="ok",status="200"}'), 3)
    assert.equal(
      sample(text, 'tokengate_http_requests_total{code="missing_authorization",status="401"}'),
      1,
    )
    assert.equal(sample(text, 'tokengate_http_requests_total{code="not_found",status="404"}'), 1)
    assert.equal(
      sample(text, 'tokengate_http_requests_total{code="invalid_token",status="401"}'),
      invalid,
    )
    assert.equal(
      sample(text, 'tokengate_http_requests_total{code="rate_limited",status="429"}'),
      limited,
    )
    assert.equal(
      sample(text, 'tokengate_rate_limit_rejections_total{policy="failed-auth"}'),
      limited,
    )
    assert.equal(
      sample(text, 'tokengate_auth_duration_seconds_count{token_type="pat",outcome="ok"}'),
      4,
      'three /me and the 404 authenticated',
    )
    assert.ok(
      (sample(text, 'tokengate_auth_duration_seconds_sum{token_type="pat",outcome="ok"}') ?? 0) > 0,
    )
    assert.equal(
      sample(
        text,
        'tokengate_auth_duration_seconds_count{token_type="none",outcome="missing_authorization"}',
      ),
      1,
    )
    // The demo PAT was looked up once and then served from the cache.
    const hits = sample(text, 'tokengate_lookup_cache_hits_total') ?? 0
    const misses = sample(text, 'tokengate_lookup_cache_misses_total') ?? 0
    assert.ok(hits >= 2, `cache hits ${hits}`)
    assert.ok(misses >= 1, `cache misses ${misses}`)
    const ratio = sample(text, 'tokengate_lookup_cache_hit_ratio') as number
    assert.ok(Math.abs(ratio - hits / (hits + misses)) < 1e-9)
    assert.match(text, /^tokengate_audit_queue_events \d+$/m)
    assert.match(text, /^tokengate_process_cpu_seconds_total /m, 'default process metrics')
    assert.ok(!text.includes(token) && !text.includes(`${token.slice(-4)}"`), 'no token in labels')
    assert.ok(!text.includes('pat_garbage'))

    const other = await fetch(String(url).replace('/metrics', '/'))
    assert.equal(other.status, 404)
  })

  it('two servers in one process keep separate registries', async (t) => {
    const a = await startTestServer({ metrics: { enabled: true, port: 0 } })
    t.after(() => a.close())
    const b = await startTestServer({ metrics: { enabled: true, port: 0 } })
    t.after(() => b.close())
    await a.request('/api/v1/me')
    await a.request('/api/v1/me')
    const textA = await scrape(String(a.running.metricsUrl))
    const textB = await scrape(String(b.running.metricsUrl))
    const series = 'tokengate_http_requests_total{code="missing_authorization",status="401"}'
    assert.equal(sample(textA, series), 2)
    assert.equal(sample(textB, series), undefined)
  })

  it('reports the event outbox and webhook deliveries when a webhook is configured', async (t) => {
    const server = await startTestServer({
      metrics: { enabled: true, port: 0 },
      // Nothing listens on port 9: every delivery fails and events wait in the outbox.
      events: {
        webhookUrl: 'http://127.0.0.1:9/hook',
        webhookSecret: 'whsec_metrics_test_secret',
        pollIntervalMs: 20,
        retryInitialMs: 20,
        retryMaxMs: 40,
      },
    })
    t.after(() => server.close())
    await server.request('/api/v1/me', ['Authorization', 'Bearer nope'])
    let text = ''
    const deadline = Date.now() + 5000
    do {
      await new Promise((r) => setTimeout(r, 100))
      text = await scrape(String(server.running.metricsUrl))
    } while (
      ((sample(text, 'tokengate_events_delivery_failures_total') ?? 0) < 1 ||
        (sample(text, 'tokengate_events_outbox_pending') ?? 0) < 1) &&
      Date.now() < deadline
    )
    assert.ok((sample(text, 'tokengate_events_outbox_pending') ?? 0) >= 1)
    assert.ok((sample(text, 'tokengate_events_delivery_failures_total') ?? 0) >= 1)
    assert.equal(sample(text, 'tokengate_events_delivered_total'), 0)
    assert.ok((sample(text, 'tokengate_events_outbox_oldest_age_seconds') ?? -1) >= 0)
  })
})
