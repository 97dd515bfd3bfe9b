import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import pino from 'pino'
import { niceStep, usageChart } from '../../src/admin/chart.ts'
import { detailsView } from '../../src/admin/console-audit.ts'
import { escapeHtml, html, time } from '../../src/admin/html.ts'
import { buildAdminServer } from '../../src/admin/server.ts'
import {
  createSessions,
  csrfMatches,
  MAX_SESSIONS,
  MAX_SESSIONS_PER_CREDENTIAL,
} from '../../src/admin/sessions.ts'
import { auditCsv, issuerView } from '../../src/admin/views.ts'
import type { UsageSeries } from '../../src/auth/usage.ts'
import { loadConfig } from '../../src/config/load.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const T0 = Date.UTC(2026, 5, 1, 12)
const operator = {
  actor: 'admin:a',
  role: 'operator' as const,
  expiresAt: T0 + 3_600_000,
  adminTokenHash: undefined,
}

describe('html', () => {
  test('escapes every interpolated value, keeps nested fragments', () => {
    const evil = `<script>alert("x")</script>'&`
    assert.equal(
      html`<p title="${evil}">${evil}${html`<b>${1}</b>`}${[html`<i>a</i>`, 'b&']}${null}${false}</p>`
        .text,
      `<p title="${escapeHtml(evil)}">&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&#39;&amp;<b>1</b><i>a</i>b&amp;</p>`,
    )
    assert.equal(String(html`x`), 'x')
  })
  test('time: ISO in datetime and title, a placeholder for null', () => {
    assert.equal(
      time(T0).text,
      '<time datetime="2026-06-01T12:00:00.000Z" title="2026-06-01T12:00:00.000Z">2026-06-01T12:00:00Z</time>',
    )
    assert.equal(time(null, 'never').text, '<span>never</span>')
  })
})

describe('sessions (in the store)', () => {
  async function sessionsOn(options: { ttlMs: number; idleMs: number }) {
    const store = openSqliteStore(join(tempDir('tg-sessions-'), 'db.sqlite'))
    await store.migrate()
    return { store, sessions: createSessions(store.admin, options) }
  }

  test('end at their lifetime, after idling, at the credential expiry, and on sign-out', async () => {
    const { store, sessions } = await sessionsOn({ ttlMs: 200_000, idleMs: 80_000 })
    const session = await sessions.create(operator, T0)
    assert.equal((await sessions.get(session.id, T0 + 60_000))?.csrf, session.csrf)
    assert.ok(await sessions.get(session.id, T0 + 130_000), 'the use at +60 s was recorded')
    assert.equal(await sessions.get(session.id, T0 + 200_000), undefined)
    const idle = await sessions.create(operator, T0)
    assert.equal(await sessions.get(idle.id, T0 + 80_000), undefined)
    const short = await sessions.create({ ...operator, expiresAt: T0 + 1_000 }, T0)
    assert.equal(short.expiresAt, T0 + 1_000)
    const ended = await sessions.create(operator, T0)
    await sessions.end(ended.id)
    assert.equal(await sessions.get(ended.id, T0), undefined)
    assert.equal(await sessions.get(undefined, T0), undefined)
    assert.equal(await sessions.get('x'.repeat(100), T0), undefined)
    await store.close()
  })
  test('one credential keeps at most MAX_SESSIONS_PER_CREDENTIAL, its own oldest dropped', async () => {
    const { store, sessions } = await sessionsOn({ ttlMs: 10_000, idleMs: 10_000 })
    const other = await sessions.create({ ...operator, adminTokenHash: 'other' }, T0)
    const first = await sessions.create(operator, T0)
    for (let i = 1; i <= MAX_SESSIONS_PER_CREDENTIAL; i++) await sessions.create(operator, T0 + i)
    assert.equal(await sessions.get(first.id, T0 + 100), undefined)
    assert.ok(await sessions.get(other.id, T0 + 100))
    assert.ok(MAX_SESSIONS > MAX_SESSIONS_PER_CREDENTIAL)
    await store.close()
  })
  test('the flash is stored sealed, opens once, and only with the cookie', async () => {
    const { store, sessions } = await sessionsOn({ ttlMs: 10_000, idleMs: 10_000 })
    const session = await sessions.create(operator, T0)
    const token = 'pat_secretsecretsecretsecretsecret1234ab'
    await sessions.setFlash(session, { token, label: 'x' })
    const stored = await store.admin.findSession(
      (await import('node:crypto')).hash('sha256', session.id, 'hex'),
    )
    assert.ok(stored?.flash && !stored.flash.includes('secret'))
    const stranger = { ...session, id: 'another-cookie-value' }
    assert.equal(await sessions.takeFlash(stranger), undefined)
    assert.deepEqual(await sessions.takeFlash(session), { token, label: 'x' })
    assert.equal(await sessions.takeFlash(session), undefined)
    await store.close()
  })
  test('CSRF tokens compare exactly', async () => {
    const { store, sessions } = await sessionsOn({ ttlMs: 1, idleMs: 1 })
    const session = await sessions.create(operator, T0)
    assert.equal(csrfMatches(session, session.csrf), true)
    assert.equal(csrfMatches(session, `${session.csrf}x`), false)
    assert.equal(
      csrfMatches(
        session,
        session.csrf.replace(/.$/, (c) => (c === 'a' ? 'b' : 'a')),
      ),
      false,
    )
    assert.equal(csrfMatches(session, undefined), false)
    await store.close()
  })
})

function series(
  resolution: 'minute' | 'hour' | 'day',
  points: number,
  bucketMs: number,
): UsageSeries {
  const since = T0 - points * bucketMs
  const list = Array.from({ length: points }, (_, i) => ({
    start: since + i * bucketMs,
    allowed: i,
    unauthorized: i % 3,
    forbidden: 0,
    limited: i === points - 1 ? 7 : 0,
  }))
  const sum = (k: 'allowed' | 'unauthorized' | 'forbidden' | 'limited') =>
    list.reduce((n, p) => n + p[k], 0)
  return {
    scope: 'all',
    subject: '',
    resolution,
    since,
    until: T0,
    points: list,
    totals: {
      allowed: sum('allowed'),
      unauthorized: sum('unauthorized'),
      forbidden: sum('forbidden'),
      limited: sum('limited'),
    },
  }
}

describe('usage chart', () => {
  test('an hour of minutes: time ticks at round minutes (UTC), round count ticks, the unit named', () => {
    const svg = usageChart(series('minute', 60, 60_000), 'Requests').text
    assert.match(svg, /<svg viewBox="0 0 760 280" role="img"/)
    assert.equal(svg.match(/<polyline/g)?.length, 4)
    const xTicks = [...svg.matchAll(/class="tick x-tick"[^>]*data-time="([^"]+)">([^<]+)</g)]
    assert.ok(xTicks.length >= 4 && xTicks.length <= 8, `${xTicks.length} ticks`)
    for (const [, iso, label] of xTicks) {
      assert.equal(label, (iso as string).slice(11, 16))
      assert.equal(Date.parse(iso as string) % 600_000, 0, 'ticks on round ten minutes')
    }
    const yTicks = [...svg.matchAll(/class="tick y-tick"[^>]*>([^<]+)</g)].map((m) => Number(m[1]))
    assert.deepEqual(yTicks, [0, 20, 40, 60])
    assert.match(svg, />requests per minute</)
    assert.match(svg, />time \(UTC\)</)
    assert.match(svg, /<td>429 rate limited or quota spent<\/td><td>7<\/td>/)
  })

  test('30 days: dates on the time axis, per day', () => {
    const svg = usageChart(series('day', 30, 86_400_000), 'Requests').text
    const labels = [...svg.matchAll(/class="tick x-tick"[^>]*>([^<]+)</g)].map((m) => m[1])
    assert.ok(
      labels.every((l) => /^[A-Z][a-z]{2} \d{1,2}$/.test(l as string)),
      labels.join(','),
    )
    assert.match(svg, />requests per day</)
  })

  test('round steps', () => {
    assert.deepEqual(
      [0, 4, 12, 99, 1234, 80_000].map((max) => niceStep(max, 5)),
      [1, 1, 5, 20, 500, 20_000],
    )
  })

  test('audit details read as fields, and edits as before → after', () => {
    const text = detailsView({
      tokenId: 'tok_1',
      permissions: ['a', 'b'],
      before: { name: 'x', quota: null },
      after: { name: 'y', quota: { limit: 5 } },
    }).text
    assert.match(text, /<span class="k">tokenId<\/span> tok_1/)
    assert.match(text, /<span class="k">permissions<\/span> a, b/)
    assert.match(text, /<span class="k">name<\/span> x → y/)
    assert.match(text, /<span class="k">quota<\/span> — → \{&quot;limit&quot;:5\}/)
  })
})

describe('views', () => {
  test('CSV quotes, and defuses spreadsheet formulas', () => {
    const csv = auditCsv([
      {
        id: 'e1',
        time: T0,
        type: 'auth.failed',
        tenantId: null,
        actor: '=HYPERLINK("http://evil")',
        outcome: 'invalid_token',
        clientAddress: '-1+1',
        requestId: 'r,1',
        details: { path: '/a"b' },
      },
    ])
    const [, row] = csv.split('\r\n')
    assert.equal(
      row,
      `e1,2026-06-01T12:00:00.000Z,auth.failed,,"'=HYPERLINK(""http://evil"")",invalid_token,'-1+1,"r,1","{""path"":""/a\\""b""}"`,
    )
  })
  test('issuer health: static keys list their ids; secrets are never shown', () => {
    const pem = issuerView(
      {
        issuer: 'i',
        audiences: ['a'],
        keySource: { kind: 'pem', pem: 'PEM', algorithm: 'ES256', kid: 'k1' },
      },
      undefined,
    )
    assert.deepEqual(pem.keys, {
      state: 'static',
      lastFetchAt: null,
      failingSince: null,
      keyIds: ['k1'],
    })
    const secret = issuerView(
      {
        issuer: 'i',
        audiences: ['a'],
        keySource: { kind: 'secret', secret: 'c2VjcmV0', algorithm: 'HS256' },
      },
      undefined,
    )
    assert.ok(!JSON.stringify(secret).includes('c2VjcmV0'))
    const remote = issuerView(
      { issuer: 'i', audiences: ['a'], keySource: { kind: 'oidc_discovery' } },
      { issuer: 'i', state: 'stale', loadedAt: T0, failingSince: T0 + 1, skippedKeys: [] },
    )
    assert.equal(remote.keys.state, 'stale')
    assert.equal(remote.keys.failingSince, new Date(T0 + 1).toISOString())
  })
})

describe('fail closed', () => {
  test('an unreachable store answers 503 unavailable, never a pass', async () => {
    const store = openSqliteStore(join(tempDir('tg-admin-503-'), 'db.sqlite'))
    await store.migrate()
    const app = await buildAdminServer({
      config: loadConfig({
        env: {},
        overrides: { admin: { enabled: true }, server: { plainHttp: true } },
      }),
      store,
      issuers: { issuers: () => [], keyStatus: () => [] },
      clock: { now: () => Date.now() },
      logger: pino({ level: 'silent' }),
      tls: undefined,
      changeFeed: () => undefined,
    })
    try {
      await store.close()
      const response = await app.inject({
        url: '/admin/api/v1/tenants',
        headers: { authorization: `Bearer tga_${'a'.repeat(40)}` },
      })
      assert.equal(response.statusCode, 503)
      assert.equal(response.json().code, 'unavailable')
      const page = await app.inject({ url: '/admin/sign-in' })
      assert.equal(page.statusCode, 200)
    } finally {
      await app.close()
    }
  })

  test('status says unavailable when the store does not answer its ping', async () => {
    const store = openSqliteStore(join(tempDir('tg-admin-ping-'), 'db.sqlite'))
    await store.migrate()
    const failing = new Proxy(store, {
      get(target, name) {
        if (name === 'ping') return () => Promise.reject(new Error('down'))
        const value = Reflect.get(target, name, target)
        return typeof value === 'function' ? value.bind(target) : value
      },
    })
    const { readStatus } = await import('../../src/admin/status.ts')
    const status = await readStatus({
      store: failing,
      issuers: { issuers: () => [], keyStatus: () => [] },
      clock: { now: () => T0 },
      config: loadConfig({ env: {}, overrides: { server: { plainHttp: true } } }),
      changeFeed: () => ({ connected: false }),
    } as unknown as Parameters<typeof readStatus>[0])
    assert.equal(status.status, 'unavailable')
    assert.equal(status.store, 'unreachable')
    assert.deepEqual(status.changeFeed, { state: 'disconnected' })
    await store.close()
  })
})
