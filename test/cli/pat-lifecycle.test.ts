import assert from 'node:assert/strict'
import { Readable } from 'node:stream'
import { after, before, describe, it } from 'node:test'
import { run } from '../../src/cli/main.ts'
import { generatePat, hashPat } from '../../src/core/pat.ts'
import { cli, cliJson, sink, tempDataDir, withDataStore } from './helpers.ts'

const HOUR = 3_600_000
const NOW = Date.UTC(2026, 5, 1, 12, 0, 0)
const now = () => NOW

interface IssuedJson {
  token: string
  id: string
  status: string
  oldTokenGraceUntil?: string
}

/** Runs the CLI with `input` on stdin. */
async function cliWithStdin(args: readonly string[], input: string, dataDir: string) {
  const stdout = sink()
  const stderr = sink()
  const code = await run([...args, '--data-dir', dataDir], {
    stdout,
    stderr,
    stdin: Readable.from([input]),
    env: {},
    now,
  })
  return { code, stdout: stdout.text(), stderr: stderr.text() }
}

describe('tokengate pat lifecycle: rotation grace, leak response, expiry warnings', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  const opts = { dataDir, now }
  after(() => data.cleanup())
  before(async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], opts)).code, 0)
  })

  const issue = (subject: string, ...extra: string[]) =>
    cliJson<IssuedJson>(['pat', 'issue', '--tenant', 'acme', '--subject', subject, ...extra], opts)

  it('pat rotate --grace 1h keeps the old token working until then and says so', async () => {
    const old = await issue('grace')
    const text = await cli(['pat', 'rotate', old.id, '--grace', '1h'], opts)
    assert.equal(text.code, 0, text.stderr)
    assert.match(text.stdout, new RegExp(`${old.id} keeps working until 2026-06-01T13:00:00Z`))
    const record = await withDataStore(dataDir, (s) => s.findPatByHash(hashPat(old.token)))
    assert.equal(record?.supersededAt, NOW)
    assert.equal(record?.graceUntil, NOW + HOUR)
    assert.equal(record?.revokedAt, null)

    const listed = await cliJson<{ tokens: { id: string; status: string; graceUntil: string }[] }>(
      ['pat', 'list', '--tenant', 'acme'],
      opts,
    )
    const oldRow = listed.tokens.find((t) => t.id === old.id)
    assert.equal(oldRow?.status, 'grace')
    assert.equal(oldRow?.graceUntil, new Date(NOW + HOUR).toISOString())
    const later = await cliJson<{ tokens: { id: string; status: string }[] }>(
      ['pat', 'list', '--tenant', 'acme'],
      { dataDir, now: () => NOW + HOUR },
    )
    assert.equal(later.tokens.find((t) => t.id === old.id)?.status, 'rotated')
  })

  it('pat rotate --json reports the old token’s grace end; --grace 0 is the default', async () => {
    const old = await issue('grace-json')
    const rotated = await cliJson<IssuedJson>(['pat', 'rotate', old.id, '--grace', '0'], opts)
    assert.equal(rotated.oldTokenGraceUntil, new Date(NOW).toISOString())
    const again = await issue('grace-json-2')
    const json = await cliJson<IssuedJson>(['pat', 'rotate', again.id, '--grace', '30m'], opts)
    assert.equal(json.oldTokenGraceUntil, new Date(NOW + 30 * 60_000).toISOString())
  })

  it('a bad or too long --grace exits 2 and changes nothing', async () => {
    const old = await issue('grace-bad')
    for (const [value, message] of [
      ['soon', /--grace: 'soon' is not a duration/],
      ['31d', /longer than the maximum of 30d/],
      ['-1h', /--grace: '-1h' is not a duration/],
    ] as const) {
      const result = await cli(['pat', 'rotate', old.id, '--grace', value], opts)
      assert.equal(result.code, 2, `${value}: ${result.stderr}`)
      assert.match(result.stderr, message)
    }
    const record = await withDataStore(dataDir, (s) => s.getPat(old.id))
    assert.equal(record?.supersededAt, null)
  })

  it('rotate is audited with the grace end and no token', async () => {
    const old = await issue('grace-audit')
    const rotated = await cliJson<IssuedJson>(['pat', 'rotate', old.id, '--grace', '2h'], opts)
    const events = await withDataStore(dataDir, (s) => s.listAudit('acme', { limit: 200 }))
    const event = events.items.find(
      (e) => e.type === 'pat.rotated' && e.details.rotatedFrom === old.id,
    )
    assert.equal(event?.details.tokenId, rotated.id)
    assert.equal(event?.details.graceUntil, new Date(NOW + 2 * HOUR).toISOString())
    assert.ok(!JSON.stringify(events.items).includes(rotated.token))
  })

  it('pat revoke-leaked revokes each plaintext token, reports the rest, never echoes a token', async () => {
    const a = await issue('leak-a')
    const b = await issue('leak-b')
    const stranger = generatePat()
    const result = await cli(
      ['pat', 'revoke-leaked', a.token, b.token, stranger, 'pat_notevenclose'],
      opts,
    )
    assert.equal(result.code, 1, 'an unknown token or a non-PAT makes the exit code 1')
    const lines = result.stdout.trim().split('\n')
    assert.equal(lines.length, 4)
    assert.match(
      lines[0] as string,
      new RegExp(`^pat_…${a.token.slice(-4)} ${a.id} \\(tenant acme\\): revoked$`),
    )
    assert.match(
      lines[1] as string,
      new RegExp(`^pat_…${b.token.slice(-4)} ${b.id} \\(tenant acme\\): revoked$`),
    )
    assert.match(lines[2] as string, /: unknown: no such token/)
    assert.match(lines[3] as string, /^hmac:[0-9a-f]{8}: not a tokengate PAT/)
    for (const secret of [a.token, b.token, stranger, 'pat_notevenclose']) {
      assert.ok(!result.stdout.includes(secret), 'no input token is echoed')
      assert.ok(!result.stderr.includes(secret))
    }
    const [ra, rb] = await withDataStore(dataDir, async (s) => [
      await s.getPat(a.id),
      await s.getPat(b.id),
    ])
    assert.equal(ra?.revokedAt, NOW)
    assert.equal(rb?.revokedAt, NOW)

    const events = await withDataStore(dataDir, (s) => s.listAudit('acme', { limit: 200 }))
    const leaks = events.items.filter((e) => e.type === 'pat.leak_revoked')
    assert.deepEqual(leaks.map((e) => e.details.tokenId).sort(), [a.id, b.id].sort())
    for (const e of leaks) {
      assert.match(String(e.details.fingerprint), /^pat_…[0-9A-Za-z]{4}$/)
      assert.equal(e.outcome, 'ok')
      assert.match(String(e.actor), /^cli:/)
    }
    const auditText = JSON.stringify(events.items)
    assert.ok(!auditText.includes(a.token) && !auditText.includes(b.token))

    const again = await cliJson<{ results: { outcome: string; tokenId: string }[] }>(
      ['pat', 'revoke-leaked', a.token],
      opts,
    )
    assert.deepEqual(again.results, [
      {
        fingerprint: `pat_…${a.token.slice(-4)}`,
        outcome: 'already_revoked',
        tokenId: a.id,
        tenantId: 'acme',
      },
    ])
    const after = await withDataStore(dataDir, (s) => s.listAudit('acme', { limit: 200 }))
    assert.equal(
      after.items.filter((e) => e.type === 'pat.leak_revoked').length,
      2,
      'an already revoked token is not audited again',
    )
  })

  it('pat revoke-leaked - reads every PAT in a scanner alert piped to stdin', async () => {
    const a = await issue('leak-stdin-a')
    const b = await issue('leak-stdin-b')
    const alert = JSON.stringify([
      { secret_type: 'tokengate_pat', secret: a.token, path: 'deploy.sh' },
      { secret_type: 'tokengate_pat', secret: `${b.token}`, path: '.env' },
      { secret_type: 'tokengate_pat', secret: a.token, path: 'copy.sh' },
    ])
    const result = await cliWithStdin(['pat', 'revoke-leaked', '-', '--json'], alert, dataDir)
    assert.equal(result.code, 0, result.stderr)
    const { results } = JSON.parse(result.stdout) as { results: { outcome: string }[] }
    assert.deepEqual(
      results.map((r) => r.outcome),
      ['revoked', 'revoked'],
      'the same token twice is handled once',
    )
    assert.ok(!result.stdout.includes(a.token))
    const none = await cliWithStdin(['pat', 'revoke-leaked', '-'], 'nothing to see', dataDir)
    assert.equal(none.code, 1)
    assert.match(none.stderr, /no pat_ token found/)
    const missing = await cli(['pat', 'revoke-leaked'], opts)
    assert.equal(missing.code, 2)
  })

  it('pat list --expiring-within leaves out revoked tokens and shows the rest as a table', async () => {
    const other = tempDataDir()
    try {
      const o = { dataDir: other.dir, now }
      await cli(['tenant', 'create', 't'], o)
      const soon = await cliJson<IssuedJson>(
        ['pat', 'issue', '--tenant', 't', '--subject', 'soon', '--expires-in', '2d'],
        o,
      )
      const gone = await cliJson<IssuedJson>(
        ['pat', 'issue', '--tenant', 't', '--subject', 'gone', '--expires-in', '1d'],
        o,
      )
      await cliJson(['pat', 'issue', '--tenant', 't', '--subject', 'late', '--expires-in', '8d'], o)
      await cliJson(['pat', 'revoke', gone.id], o)
      const table = await cli(['pat', 'list', '--tenant', 't', '--expiring-within', '7d'], o)
      assert.equal(table.code, 0, table.stderr)
      assert.match(table.stdout, new RegExp(soon.id))
      assert.doesNotMatch(table.stdout, new RegExp(gone.id))
      assert.doesNotMatch(table.stdout, /late/)
      assert.equal(table.stdout.trim().split('\n').length, 2, 'a header and one row')
    } finally {
      other.cleanup()
    }
  })
})
