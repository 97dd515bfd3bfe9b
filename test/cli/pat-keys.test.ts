/**
 * The CLI of keys as a product (issue #24): issue with limits, quota, metadata and an external
 * id; edit, disable, enable, show, usage; list by external id; tenant edit and usage.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

const NOW = Date.UTC(2026, 5, 1, 12, 0, 30)
const now = () => NOW
const DAY = 86_400_000

interface KeyJson {
  id: string
  token?: string
  name: string
  permissions: string[]
  status: string
  expiresAt: string | null
  rateLimit: { max: number; windowSec: number } | null
  quota: { limit: number; refill: string; intervalSec?: number } | null
  metadata: Record<string, unknown> | null
  externalId: string | null
  changed?: boolean
  quotaUsage?: { used: number; remaining: number; resetsAt: string | null } | null
}

describe('tokengate pat: keys as a product', () => {
  const data = tempDataDir()
  const opts = { dataDir: data.dir, now }
  after(() => data.cleanup())
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], opts)).code, 0)
    assert.equal((await cli(['tenant', 'create', 'beta'], opts)).code, 0)
  })

  const issue = (...extra: string[]) =>
    cliJson<KeyJson>(['pat', 'issue', '--tenant', 'acme', '--subject', 'partner', ...extra], opts)

  it('issues a key with its own rate limit, quota, metadata and external id', async () => {
    const key = await issue(
      '--rate-limit',
      '10/1s',
      '--quota',
      '10000',
      '--quota-refill',
      'monthly',
      '--metadata',
      '{"plan":"pro"}',
      '--external-id',
      'cus_42',
    )
    assert.deepEqual(
      [key.rateLimit, key.quota, key.metadata, key.externalId],
      [{ max: 10, windowSec: 1 }, { limit: 10000, refill: 'monthly' }, { plan: 'pro' }, 'cus_42'],
    )
    const human = await cli(
      [
        'pat',
        'issue',
        '--tenant',
        'acme',
        '--subject',
        'x',
        '--quota',
        '5',
        '--quota-refill',
        '12h',
      ],
      opts,
    )
    assert.equal(human.code, 0, human.stderr)
    assert.match(human.stdout, /quota: {8}5 uses every 12h/)
  })

  it('refuses bad spellings naming the flag and the value', async () => {
    for (const [args, message] of [
      [['--rate-limit', '10/sec'], /--rate-limit: '10\/sec' is not a rate/],
      [['--quota', '0'], /--quota: '0' is not a number of uses/],
      [['--quota', '5', '--quota-refill', 'weekly'], /--quota-refill: 'weekly' is not a refill/],
      [['--quota-refill', 'daily'], /--quota-refill needs --quota N/],
      [['--metadata', '[1]'], /--metadata: expected a JSON object/],
      [['--metadata', '{'], /--metadata: not JSON/],
    ] as const) {
      const result = await cli(
        ['pat', 'issue', '--tenant', 'acme', '--subject', 's', ...args],
        opts,
      )
      assert.equal(result.code, 2, `${args.join(' ')}: ${result.stderr}`)
      assert.match(result.stderr, message)
    }
    const bound = await cli(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 's', '--quota', '2000000000000'],
      opts,
    )
    assert.equal(bound.code, 1)
    assert.match(bound.stderr, /quota: 2000000000000 is not valid; expected a whole number of uses/)
  })

  it('pat edit changes only what is given; --clear-* removes; contradictions are refused', async () => {
    const key = await issue('--external-id', 'old', '--permission', 'tokens:read')
    const edited = await cliJson<KeyJson>(
      [
        'pat',
        'edit',
        key.id,
        '--name',
        'renamed',
        '--permission',
        'audit:read',
        '--rate-limit',
        '5/1m',
        '--quota',
        '3',
        '--clear-external-id',
        '--expires-in',
        '30d',
      ],
      opts,
    )
    assert.equal(edited.changed, true)
    assert.deepEqual(
      [edited.name, edited.permissions, edited.rateLimit, edited.quota, edited.externalId],
      ['renamed', ['audit:read'], { max: 5, windowSec: 60 }, { limit: 3, refill: 'none' }, null],
    )
    assert.equal(edited.expiresAt, new Date(NOW + 30 * DAY).toISOString())
    const cleared = await cliJson<KeyJson>(
      ['pat', 'edit', key.id, '--clear-quota', '--clear-permissions'],
      opts,
    )
    assert.deepEqual([cleared.quota, cleared.permissions], [null, []])
    const same = await cli(['pat', 'edit', key.id, '--name', 'renamed'], opts)
    assert.equal(same.stdout.trim(), `${key.id}: nothing to change.`)
    const both = await cli(['pat', 'edit', key.id, '--quota', '1', '--clear-quota'], opts)
    assert.equal(both.code, 2)
    assert.match(both.stderr, /--quota and --clear-quota contradict each other/)
    const audit = await withDataStore(data.dir, (store) => store.listAudit('acme', { limit: 200 }))
    const updated = audit.items.filter(
      (e) => e.type === 'pat.updated' && e.details.tokenId === key.id,
    )
    assert.equal(updated.length, 2)
    assert.equal(updated.at(-1)?.actor?.startsWith('cli:'), true)
  })

  it('pat edit --quota N keeps the refill unless one is given, and says so', async () => {
    const key = await issue('--quota', '100', '--quota-refill', 'monthly')
    const human = await cli(['pat', 'edit', key.id, '--quota', '20'], opts)
    assert.equal(human.code, 0, human.stderr)
    assert.match(
      human.stdout,
      /quota: 20 uses per UTC month \(refill monthly kept; --quota-refill none makes it a lifetime quota\)/,
    )
    const shown = await cliJson<KeyJson>(['pat', 'show', key.id], opts)
    assert.deepEqual(shown.quota, { limit: 20, refill: 'monthly' })
    const json = await cliJson<KeyJson & { notes: string[] }>(
      ['pat', 'edit', key.id, '--quota', '30'],
      opts,
    )
    assert.deepEqual(json.quota, { limit: 30, refill: 'monthly' })
    assert.deepEqual(json.notes, ['quota: refill monthly kept'])
    const lifetime = await cliJson<KeyJson>(
      ['pat', 'edit', key.id, '--quota', '30', '--quota-refill', 'none'],
      opts,
    )
    assert.deepEqual(lifetime.quota, { limit: 30, refill: 'none' })
  })

  it('pat edit keeps the expiry within the maximum lifetime from creation', async () => {
    const config = join(data.dir, 'policy.json')
    writeFileSync(
      config,
      JSON.stringify({ pat: { defaultExpiresInDays: 30, maxExpiresInDays: 60 } }),
    )
    const key = await cliJson<KeyJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 's', '--config', config],
      opts,
    )
    const later = { ...opts, now: () => NOW + 40 * DAY }
    const edit = (...args: string[]) =>
      cli(['pat', 'edit', key.id, '--config', config, ...args], later)
    const result = await edit('--expires-in', '30d')
    assert.equal(result.code, 1)
    assert.match(result.stderr, /would make .* live longer than 60d from its creation/)
    assert.equal((await edit('--expires-in', 'never')).code, 1)
    const ok = await edit('--expires-in', '20d')
    assert.equal(ok.code, 0, ok.stderr)
  })

  it('disable, enable, show with what is left of the quota', async () => {
    const key = await issue('--quota', '100', '--quota-refill', 'daily')
    const disabled = await cliJson<KeyJson>(['pat', 'disable', key.id], opts)
    assert.deepEqual([disabled.status, disabled.changed], ['disabled', true])
    assert.equal(
      (await cli(['pat', 'disable', key.id], opts)).stdout.trim(),
      `${key.id} was already disabled.`,
    )
    assert.equal((await cliJson<KeyJson>(['pat', 'enable', key.id], opts)).status, 'active')
    await withDataStore(data.dir, (store) =>
      store.reserveQuota(key.id, Math.floor(NOW / DAY) * DAY, 100, 40),
    )
    const shown = await cliJson<KeyJson>(['pat', 'show', key.id], opts)
    assert.deepEqual(
      [shown.quotaUsage?.used, shown.quotaUsage?.remaining, shown.quotaUsage?.resetsAt],
      [40, 60, new Date(Math.floor(NOW / DAY) * DAY + DAY).toISOString()],
    )
    const human = await cli(['pat', 'show', key.id], opts)
    assert.match(human.stdout, /quota left: {3}60 of 100 \(refills /)
    assert.match((await cli(['pat', 'show', 'tok_nope'], opts)).stderr, /no token tok_nope/)
  })

  it('a revoked key cannot be edited or disabled', async () => {
    const key = await issue()
    assert.equal((await cli(['pat', 'revoke', key.id], opts)).code, 0)
    const result = await cli(['pat', 'disable', key.id], opts)
    assert.equal(result.code, 1)
    assert.match(result.stderr, /is revoked .* a revoked key cannot be changed/)
  })

  it('pat list --external-id finds keys in every tenant, or in one', async () => {
    await cliJson(
      ['pat', 'issue', '--tenant', 'beta', '--subject', 's', '--external-id', 'cus_x'],
      opts,
    )
    await issue('--external-id', 'cus_x')
    const all = await cliJson<{ tokens: { tenantId: string }[] }>(
      ['pat', 'list', '--external-id', 'cus_x'],
      opts,
    )
    assert.deepEqual(all.tokens.map((t) => t.tenantId).sort(), ['acme', 'beta'])
    const one = await cliJson<{ tokens: unknown[] }>(
      ['pat', 'list', '--external-id', 'cus_x', '--tenant', 'beta'],
      opts,
    )
    assert.equal(one.tokens.length, 1)
    const table = await cli(['pat', 'list', '--external-id', 'cus_x'], opts)
    assert.match(table.stdout, /^ID +TOKEN +TENANT/)
  })

  it('pat usage and tenant usage: table, CSV and the busiest keys', async () => {
    const key = await issue()
    const minute = Math.floor(NOW / 60_000) * 60_000
    await withDataStore(data.dir, (store) =>
      store.addUsage([
        {
          scope: 'key',
          subject: key.id,
          resolution: 'minute',
          bucketStart: minute,
          tenantId: 'acme',
          allowed: 7,
          unauthorized: 1,
          forbidden: 0,
          limited: 2,
        },
        {
          scope: 'key',
          subject: key.id,
          resolution: 'hour',
          bucketStart: minute - (minute % 3_600_000),
          tenantId: 'acme',
          allowed: 7,
          unauthorized: 1,
          forbidden: 0,
          limited: 2,
        },
        {
          scope: 'tenant',
          subject: 'acme',
          resolution: 'minute',
          bucketStart: minute,
          tenantId: null,
          allowed: 9,
          unauthorized: 1,
          forbidden: 0,
          limited: 2,
        },
      ]),
    )
    const table = await cli(['pat', 'usage', key.id], opts)
    assert.equal(table.code, 0, table.stderr)
    assert.match(table.stdout, /START +ALLOWED +401 +403 +429\n2026-06-01T12:00:00Z +7 +1 +0 +2/)
    assert.match(table.stdout, /total .* 7 allowed, 1 401, 0 403, 2 429/)
    const csv = await cli(['pat', 'usage', key.id, '--csv', '--since', '5m'], opts)
    assert.equal(
      csv.stdout.split('\n')[0],
      'start,resolution,scope,subject,allowed,unauthorized,forbidden,limited',
    )
    assert.ok(csv.stdout.includes(`2026-06-01T12:00:00.000Z,minute,key,${key.id},7,1,0,2`))
    const tenant = await cliJson<{ totals: { allowed: number }; topKeys: { tokenId: string }[] }>(
      ['tenant', 'usage', 'acme', '--resolution', 'hour', '--top', '3'],
      opts,
    )
    assert.equal(tenant.topKeys[0]?.tokenId, key.id)
    const bad = await cli(['pat', 'usage', key.id, '--resolution', 'week'], opts)
    assert.equal(bad.code, 2)
    assert.match(bad.stderr, /--resolution: 'week' is not minute, hour or day/)
  })

  it('tenant edit: a rate limit of its own, back to the default; listed', async () => {
    const edited = await cliJson<{ rateLimit: unknown; changed: boolean }>(
      ['tenant', 'edit', 'beta', '--rate-limit', '500/1m', '--name', 'Beta Inc'],
      opts,
    )
    assert.deepEqual(edited.rateLimit, { max: 500, windowSec: 60 })
    assert.match((await cli(['tenant', 'list'], opts)).stdout, /beta +Beta Inc +enabled +500\/60s/)
    const back = await cliJson<{ rateLimit: unknown }>(
      ['tenant', 'edit', 'beta', '--clear-rate-limit'],
      opts,
    )
    assert.equal(back.rateLimit, null)
    assert.match(
      (await cli(['tenant', 'edit', 'nobody', '--name', 'x'], opts)).stderr,
      /no tenant nobody/,
    )
  })
})
