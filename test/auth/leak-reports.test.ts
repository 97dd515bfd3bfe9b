/**
 * The leak-report handler and the key-field rules, without HTTP: GitHub's keys file refused in
 * every malformed shape (naming what is wrong), matches parsed defensively, and each key
 * field's bad value named. The endpoint itself is attacked in test/attack/leak-report.test.ts.
 */
import assert from 'node:assert/strict'
import { generateKeyPairSync, sign } from 'node:crypto'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import {
  checkExternalId,
  checkKeyName,
  checkKeyPermissions,
  checkMetadata,
  checkQuotaSpec,
} from '../../src/auth/key-fields.ts'
import { createGithubLeakReports, parseGithubKeys } from '../../src/auth/leak-reports.ts'
import type { OperationDeps } from '../../src/auth/operations.ts'
import { openSqliteStore, type SqliteStore } from '../../src/stores/sqlite.ts'
import { testClock } from '../helpers/clock.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const pem = (type: 'ec' | 'ed25519') =>
  (type === 'ec'
    ? generateKeyPairSync('ec', { namedCurve: 'secp384r1' })
    : generateKeyPairSync('ed25519')
  ).publicKey.export({ type: 'spki', format: 'pem' }) as string

describe("GitHub's keys file", () => {
  it('refuses every malformed shape, naming the file and what is wrong', () => {
    const cases: [string, RegExp][] = [
      ['not json', /f: not JSON/],
      ['{}', /expected \{ "public_keys"/],
      ['{"public_keys": []}', /expected \{ "public_keys"/],
      ['{"public_keys": [null]}', /public_keys\[0\] needs a key_identifier and a PEM key/],
      ['{"public_keys": [{"key_identifier": "k"}]}', /public_keys\[0\] needs/],
      [
        '{"public_keys": [{"key_identifier": "k", "key": "nope"}]}',
        /key k is not a PEM public key/,
      ],
      [
        JSON.stringify({ public_keys: [{ key_identifier: 'p384', key: pem('ec') }] }),
        /key p384 is not an ECDSA P-256 public key/,
      ],
      [
        JSON.stringify({ public_keys: [{ key_identifier: 'ed', key: pem('ed25519') }] }),
        /key ed is not an ECDSA P-256 public key/,
      ],
    ]
    for (const [text, message] of cases) {
      assert.throws(() => parseGithubKeys(text, 'f'), message, text)
    }
  })
})

describe('leak report handling', () => {
  let store: SqliteStore
  const github = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const keys = parseGithubKeys(
    JSON.stringify({
      public_keys: [
        { key_identifier: 'k', key: github.publicKey.export({ type: 'spki', format: 'pem' }) },
      ],
    }),
    'keys',
  )
  let deps: OperationDeps

  before(async () => {
    store = openSqliteStore(join(tempDir('tg-leak-unit-'), 'db.sqlite'))
    await store.migrate()
    deps = { store, clock: testClock(), actor: { actor: 'github:test' }, audit: { write() {} } }
  })
  after(() => store.close())

  const signed = (body: string) => ({
    keyIds: ['k'],
    signatures: [sign('sha256', Buffer.from(body), github.privateKey).toString('base64')],
    body: Buffer.from(body),
  })

  it('refuses matches without a usable token after the signature is checked', async () => {
    const reports = createGithubLeakReports({ keys, maxMatches: 10 })
    for (const body of ['[{"type":"x"}]', '[null]', `[{"token":"${'a'.repeat(1025)}"}]`]) {
      const answer = await reports.handle(deps, signed(body))
      assert.equal(answer.ok, false, body)
      assert.ok(!answer.ok && answer.code === 'validation_failed' && answer.status === 400)
    }
  })

  it('labels non-PAT strings false positives; a type is kept, a URL only when https', async () => {
    const reports = createGithubLeakReports({ keys, maxMatches: 10 })
    const answer = await reports.handle(
      deps,
      signed('[{"token":"ghp_x","type":"t","url":"javascript:alert(1)"},{"token":"y"}]'),
    )
    assert.ok(answer.ok)
    assert.deepEqual(
      answer.body.map((l) => [l.token_type, l.label]),
      [
        ['t', 'false_positive'],
        ['', 'false_positive'],
      ],
    )
  })

  it('remembers at most 1,000 answers (the oldest forgotten first)', async () => {
    const reports = createGithubLeakReports({ keys, maxMatches: 10 })
    for (let i = 0; i < 1001; i++) {
      assert.ok((await reports.handle(deps, signed(`[{"token":"t${i}"}]`))).ok)
    }
  })
})

describe('key fields name the bad value', () => {
  it('names, permissions, external ids, quotas and metadata', () => {
    assert.throws(() => checkKeyName('x'.repeat(101)), /^OperationRefused: name: "x{20}/)
    assert.throws(
      () => checkKeyPermissions(['ok:read', 'Not OK']),
      /permission: "Not OK" is not valid/,
    )
    assert.deepEqual(checkKeyPermissions(['a:b', 'a:b']), ['a:b'])
    assert.throws(() => checkExternalId(''), /external id: "" is not valid/)
    assert.throws(
      () => checkQuotaSpec({ limit: 5, refill: 'daily', intervalSec: 60 }),
      /quota interval: 60 is not valid; expected an interval only with refill interval/,
    )
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    assert.throws(() => checkMetadata(cyclic), /metadata: "\(unserialisable\)"/)
    assert.deepEqual(checkMetadata({ a: [1, { b: null }] }), { a: [1, { b: null }] })
  })
})
