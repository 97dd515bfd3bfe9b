import assert from 'node:assert/strict'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { checkPatFormat, hashPat } from '../../src/core/pat.ts'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

const DAY = 86_400_000
const NOW = Date.UTC(2026, 5, 1, 12, 0, 0)
const now = () => NOW

interface IssuedJson {
  token: string
  id: string
  tenantId: string
  subject: string
  name: string
  permissions: string[]
  last4: string
  status: string
  expiresAt: string | null
  revokedAt: string | null
  rotatedFrom: string | null
}

describe('tokengate pat', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  const opts = { dataDir, now }
  after(() => data.cleanup())
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], opts)).code, 0)
    assert.equal((await cli(['tenant', 'create', 'frozen'], opts)).code, 0)
    assert.equal((await cli(['tenant', 'disable', 'frozen'], opts)).code, 0)
  })

  it('pat issue prints a valid token once, labelled, with a warning', async () => {
    const result = await cli(
      [
        'pat',
        'issue',
        '--tenant',
        'acme',
        '--subject',
        'ci',
        '--permission',
        'tokens:read',
        '--name',
        'deploy',
      ],
      opts,
    )
    assert.equal(result.code, 0, result.stderr)
    const tokens = result.stdout.match(/pat_[0-9A-Za-z]{38}/g) ?? []
    assert.equal(tokens.length, 1)
    assert.deepEqual(checkPatFormat(tokens[0] as string), { ok: true })
    assert.match(result.stdout, /Token \(shown once: it will not be shown again/)
    assert.match(result.stdout, /permissions: {2}tokens:read/)
  })

  it('the token is stored only as its hash: the plaintext is nowhere in the data directory', async () => {
    const { token, id } = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'secret-check'],
      opts,
    )
    const record = await withDataStore(dataDir, (store) => store.findPatByHash(hashPat(token)))
    assert.equal(record?.id, id)
    for (const file of readdirSync(dataDir)) {
      const bytes = readFileSync(join(dataDir, file))
      assert.equal(bytes.includes(token), false, `${file} contains the token`)
      assert.equal(bytes.includes(token.slice(4, 36)), false, `${file} contains the random part`)
    }
  })

  it('pat issue --json has the token, the id and metadata, never the hash', async () => {
    const issued = await cliJson<IssuedJson & Record<string, unknown>>(
      [
        'pat',
        'issue',
        '--tenant',
        'acme',
        '--subject',
        'bot',
        '--permission',
        'tokens:read',
        '--permission',
        'audit:read',
        '--permission',
        'tokens:read',
      ],
      opts,
    )
    assert.deepEqual(checkPatFormat(issued.token), { ok: true })
    assert.match(issued.id, /^tok_/)
    assert.deepEqual(issued.permissions, ['tokens:read', 'audit:read'])
    assert.equal(issued.last4, issued.token.slice(-4))
    assert.equal(issued.status, 'active')
    assert.equal('tokenHash' in issued, false)
    assert.equal(JSON.stringify(issued).includes(hashPat(issued.token)), false)
  })

  it('the default expiry is config pat.defaultExpiresInDays (90 days)', async () => {
    const issued = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'd'],
      opts,
    )
    assert.equal(issued.expiresAt, new Date(NOW + 90 * DAY).toISOString())
  })

  it('--expires-in takes minutes, hours, days and never', async () => {
    const cases: [string, string | null][] = [
      ['30m', new Date(NOW + 30 * 60_000).toISOString()],
      ['12h', new Date(NOW + 12 * 3_600_000).toISOString()],
      ['7d', new Date(NOW + 7 * DAY).toISOString()],
      ['never', null],
    ]
    for (const [expiresIn, expected] of cases) {
      const issued = await cliJson<IssuedJson>(
        ['pat', 'issue', '--tenant', 'acme', '--subject', 'e', '--expires-in', expiresIn],
        opts,
      )
      assert.equal(issued.expiresAt, expected, expiresIn)
    }
  })

  it('a bad --expires-in exits 2 and shows the expected form', async () => {
    for (const bad of ['90', '1.5d', '0d', 'forever', '-1d']) {
      const result = await cli(
        ['pat', 'issue', '--tenant', 'acme', '--subject', 'e', `--expires-in=${bad}`],
        opts,
      )
      assert.equal(result.code, 2, bad)
      assert.match(
        result.stderr,
        /--expires-in: .* is not a duration \(expected e\.g\. 90d, 12h, 30m, or never\)/,
      )
    }
  })

  it('with pat.maxExpiresInDays, never and longer lifetimes are refused', async () => {
    const config = join(dataDir, 'policy.json')
    writeFileSync(
      config,
      JSON.stringify({ pat: { defaultExpiresInDays: 30, maxExpiresInDays: 30 } }),
    )
    const base = ['pat', 'issue', '--tenant', 'acme', '--subject', 'p', '--config', config]
    const never = await cli([...base, '--expires-in', 'never'], opts)
    assert.equal(never.code, 2)
    assert.match(never.stderr, /--expires-in never is not allowed: .* limited to 30d/)
    const tooLong = await cli([...base, '--expires-in', '31d'], opts)
    assert.equal(tooLong.code, 2)
    assert.match(tooLong.stderr, /longer than the maximum PAT lifetime of 30d/)
    const ok = await cliJson<IssuedJson>([...base, '--expires-in', '30d'], opts)
    assert.equal(ok.expiresAt, new Date(NOW + 30 * DAY).toISOString())
    const byDefault = await cliJson<IssuedJson>(base, opts)
    assert.equal(byDefault.expiresAt, new Date(NOW + 30 * DAY).toISOString())
  })

  it('an unknown tenant exits 1', async () => {
    const result = await cli(['pat', 'issue', '--tenant', 'nobody', '--subject', 'x'], opts)
    assert.equal(result.code, 1)
    assert.match(result.stderr, /no tenant nobody/)
    assert.doesNotMatch(result.stdout, /pat_/)
  })

  it('a disabled tenant exits 1', async () => {
    const result = await cli(['pat', 'issue', '--tenant', 'frozen', '--subject', 'x'], opts)
    assert.equal(result.code, 1)
    assert.match(result.stderr, /tenant frozen is disabled/)
  })

  it('missing --tenant or --subject exits 2 naming the flag', async () => {
    const noSubject = await cli(['pat', 'issue', '--tenant', 'acme'], opts)
    assert.equal(noSubject.code, 2)
    assert.match(noSubject.stderr, /missing --subject: expected/)
    assert.match(noSubject.stderr, /tokengate pat issue --help/)
    const noTenant = await cli(['pat', 'issue', '--subject', 'x'], opts)
    assert.equal(noTenant.code, 2)
    assert.match(noTenant.stderr, /missing --tenant: expected a tenant id/)
  })

  it('an invalid permission exits 2 and shows the expected shape', async () => {
    for (const bad of ['Tokens:read', 'tokens read', ':read', 'tokens:', '1tokens']) {
      const result = await cli(
        ['pat', 'issue', '--tenant', 'acme', '--subject', 'x', '--permission', bad],
        opts,
      )
      assert.equal(result.code, 2, bad)
      assert.match(
        result.stderr,
        /--permission: .* is not a valid permission \(expected e\.g\. tokens:read/,
      )
    }
  })

  it('pat list shows metadata with pat_…last4 and never a token or hash', async () => {
    const issued = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'lister'],
      opts,
    )
    const table = await cli(['pat', 'list', '--tenant', 'acme'], opts)
    assert.equal(table.code, 0)
    assert.match(table.stdout, /^ID\s+TOKEN\s+NAME\s+SUBJECT/)
    assert.ok(table.stdout.includes(`pat_…${issued.last4}`))
    const { tokens } = await cliJson<{ tokens: Record<string, unknown>[] }>(
      ['pat', 'list', '--tenant', 'acme'],
      opts,
    )
    const listed = tokens.find((t) => t.id === issued.id)
    assert.equal(listed?.subject, 'lister')
    for (const text of [table.stdout, JSON.stringify(tokens)]) {
      assert.equal(text.includes(issued.token), false)
      assert.equal(text.includes(hashPat(issued.token)), false)
      assert.doesNotMatch(text, /tokenHash/)
    }
  })

  it('pat list --expiring-within keeps only tokens expiring within that time', async () => {
    const other = tempDataDir()
    try {
      const o = { dataDir: other.dir, now }
      await cli(['tenant', 'create', 't'], o)
      const soon = await cliJson<IssuedJson>(
        ['pat', 'issue', '--tenant', 't', '--subject', 's', '--expires-in', '3d'],
        o,
      )
      await cliJson(['pat', 'issue', '--tenant', 't', '--subject', 's', '--expires-in', '30d'], o)
      await cliJson(['pat', 'issue', '--tenant', 't', '--subject', 's', '--expires-in', 'never'], o)
      const { tokens } = await cliJson<{ tokens: { id: string }[] }>(
        ['pat', 'list', '--tenant', 't', '--expiring-within', '7d'],
        o,
      )
      assert.deepEqual(
        tokens.map((t) => t.id),
        [soon.id],
      )
      const all = await cliJson<{ tokens: unknown[] }>(['pat', 'list', '--tenant', 't'], o)
      assert.equal(all.tokens.length, 3)
      const bad = await cli(['pat', 'list', '--tenant', 't', '--expiring-within', 'soon'], o)
      assert.equal(bad.code, 2)
      assert.match(bad.stderr, /--expiring-within: 'soon' is not a duration/)
    } finally {
      other.cleanup()
    }
  })

  it('pat list for an unknown tenant exits 1', async () => {
    const result = await cli(['pat', 'list', '--tenant', 'nobody'], opts)
    assert.equal(result.code, 1)
    assert.match(result.stderr, /no tenant nobody/)
  })

  it('pat revoke marks the token revoked in the store; revoking again is harmless', async () => {
    const issued = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'r'],
      opts,
    )
    const result = await cli(['pat', 'revoke', issued.id], { dataDir, now: () => NOW + 1000 })
    assert.equal(result.code, 0, result.stderr)
    assert.match(
      result.stdout,
      new RegExp(`Revoked ${issued.id} \\(pat_…${issued.last4}, tenant acme\\)`),
    )
    const record = await withDataStore(dataDir, (store) =>
      store.findPatByHash(hashPat(issued.token)),
    )
    assert.equal(record?.revokedAt, NOW + 1000)
    const again = await cliJson(['pat', 'revoke', issued.id], { dataDir, now: () => NOW + 5000 })
    assert.equal(again.changed, false)
    assert.equal(again.revokedAt, new Date(NOW + 1000).toISOString())
  })

  it('pat revoke accepts the token itself and looks it up by hash', async () => {
    const issued = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'leaked'],
      opts,
    )
    const result = await cli(['pat', 'revoke', issued.token], opts)
    assert.equal(result.code, 0, result.stderr)
    assert.equal(result.stdout.includes(issued.token), false)
    const record = await withDataStore(dataDir, (store) => store.getPat(issued.id))
    assert.equal(record?.revokedAt, NOW)
  })

  it('pat revoke of an unknown id exits 1; without an id exits 2', async () => {
    const unknown = await cli(['pat', 'revoke', 'tok_doesnotexist'], opts)
    assert.equal(unknown.code, 1)
    assert.match(unknown.stderr, /no token tok_doesnotexist/)
    const missing = await cli(['pat', 'revoke'], opts)
    assert.equal(missing.code, 2)
    assert.match(missing.stderr, /missing argument TOKEN_ID/)
  })

  it('pat rotate issues a new token with the same grants; the old one is rotated out at once', async () => {
    const old = await cliJson<IssuedJson>(
      [
        'pat',
        'issue',
        '--tenant',
        'acme',
        '--subject',
        'rot',
        '--name',
        'n',
        '--permission',
        'tokens:read',
        '--expires-in',
        '1d',
      ],
      opts,
    )
    const later = NOW + 10 * DAY
    const result = await cli(['pat', 'rotate', old.id], { dataDir, now: () => later })
    assert.equal(result.code, 0, result.stderr)
    const tokens = result.stdout.match(/pat_[0-9A-Za-z]{38}/g) ?? []
    assert.equal(tokens.length, 1)
    const fresh = tokens[0] as string
    assert.notEqual(fresh, old.token)
    assert.match(result.stdout, /shown once/)
    const [oldRecord, newRecord] = await withDataStore(dataDir, async (store) => [
      await store.findPatByHash(hashPat(old.token)),
      await store.findPatByHash(hashPat(fresh)),
    ])
    assert.equal(oldRecord?.supersededAt, later)
    assert.equal(oldRecord?.graceUntil, later, 'default grace 0: refused from now on')
    assert.equal(oldRecord?.revokedAt, null, 'rotated out, not revoked: reuse stays detectable')
    assert.match(result.stdout, /is refused from now on/)
    assert.equal(newRecord?.rotatedFrom, old.id)
    assert.equal(newRecord?.revokedAt, null)
    assert.equal(newRecord?.subject, 'rot')
    assert.equal(newRecord?.name, 'n')
    assert.deepEqual(newRecord?.permissions, ['tokens:read'])
    assert.equal(newRecord?.expiresAt, later + 90 * DAY)
  })

  it('pat rotate --json prints the new token; a rotated or revoked token cannot be rotated', async () => {
    const old = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'rj'],
      opts,
    )
    const rotated = await cliJson<IssuedJson>(['pat', 'rotate', old.id, '--expires-in', '2d'], opts)
    assert.deepEqual(checkPatFormat(rotated.token), { ok: true })
    assert.equal(rotated.rotatedFrom, old.id)
    assert.equal(rotated.expiresAt, new Date(NOW + 2 * DAY).toISOString())
    const again = await cli(['pat', 'rotate', old.id], opts)
    assert.equal(again.code, 1)
    assert.match(again.stderr, /was already rotated/)
    await cliJson(['pat', 'revoke', rotated.id], opts)
    const revoked = await cli(['pat', 'rotate', rotated.id], opts)
    assert.equal(revoked.code, 1)
    assert.match(revoked.stderr, /is revoked/)
  })

  it('issue, revoke and rotate are audited without any token in the details', async () => {
    const issued = await cliJson<IssuedJson>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'aud'],
      opts,
    )
    const rotated = await cliJson<IssuedJson>(['pat', 'rotate', issued.id], opts)
    await cliJson(['pat', 'revoke', rotated.id], opts)
    const events = await withDataStore(dataDir, (store) => store.listAudit('acme', { limit: 200 }))
    const mine = events.items.filter(
      (e) => e.details.tokenId === issued.id || e.details.tokenId === rotated.id,
    )
    // All at the same injected time, so compare as a set.
    assert.deepEqual(mine.map((e) => e.type).sort(), ['pat.issued', 'pat.revoked', 'pat.rotated'])
    const text = JSON.stringify(events.items)
    for (const token of [issued.token, rotated.token]) {
      assert.equal(text.includes(token), false)
      assert.equal(text.includes(hashPat(token)), false)
    }
    assert.ok(mine.every((e) => String(e.actor).startsWith('cli:') && e.outcome === 'ok'))
  })
})
