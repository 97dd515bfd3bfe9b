import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { formatDuration, parseDuration } from '../../src/cli/durations.ts'
import { cli, tempDataDir } from './helpers.ts'

describe('tokengate migrate and openapi', () => {
  const data = tempDataDir()
  after(() => data.cleanup())

  it('migrate applies every migration once, then reports the store up to date', async () => {
    const first = await cli(['migrate', '--json'], { dataDir: data.dir })
    assert.equal(first.code, 0, first.stderr)
    const applied = JSON.parse(first.stdout) as { store: string; applied: number[] }
    assert.equal(applied.store, 'sqlite')
    assert.ok(applied.applied.length > 0)
    const second = await cli(['migrate'], { dataDir: data.dir })
    assert.equal(second.code, 0)
    assert.equal(second.stdout, 'The sqlite store is up to date; no migration applied.\n')
  })

  it('a malformed --database-url exits 2 without echoing it', async () => {
    const result = await cli(['migrate', '--database-url', 'mysql://user:hunter2@db/x'])
    assert.equal(result.code, 2)
    assert.match(result.stderr, /--database-url: expected a postgres:\/\/ or postgresql:\/\/ URL/)
    assert.doesNotMatch(result.stderr, /hunter2/)
  })

  it('openapi prints the OpenAPI 3.1 document as JSON', async () => {
    const result = await cli(['openapi'])
    assert.equal(result.code, 0, result.stderr)
    const document = JSON.parse(result.stdout) as {
      openapi: string
      paths: Record<string, unknown>
    }
    assert.match(document.openapi, /^3\.1\./)
    assert.ok(Object.keys(document.paths).some((path) => path.includes('/tokens')))
  })
})

describe('CLI durations', () => {
  it('parses <integer><unit> for s, m, h, d and w', () => {
    assert.equal(parseDuration('45s'), 45_000)
    assert.equal(parseDuration('30m'), 1_800_000)
    assert.equal(parseDuration('12h'), 43_200_000)
    assert.equal(parseDuration('90d'), 7_776_000_000)
    assert.equal(parseDuration('2w'), 1_209_600_000)
  })

  it('refuses zero, fractions, signs, spaces and missing units', () => {
    for (const bad of ['0d', '1.5h', '-1d', '+1d', ' 3d', '3d ', '90', 'd', '3D', '01d']) {
      assert.equal(parseDuration(bad), undefined, bad)
    }
  })

  it('formats in the largest exact unit', () => {
    assert.equal(formatDuration(86_400_000), '1d')
    assert.equal(formatDuration(36 * 3_600_000), '36h')
    assert.equal(formatDuration(1500), '1500ms')
  })
})
