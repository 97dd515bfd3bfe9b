/**
 * The admin store (migration 6 and the operator searches) behaves the same on SQLite and
 * Postgres: admin tokens by hash, revocation, cross-tenant PAT and audit searches with
 * keyset pagination and LIKE wildcards taken literally.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { hashAdminToken, issueAdminToken, verifyAdminToken } from '../../src/auth/admin-tokens.ts'
import { storeAuditSink } from '../../src/auth/audit-events.ts'
import { issuePat } from '../../src/core/pat.ts'
import { openPostgresStore } from '../../src/stores/postgres.ts'
import { openSqliteStore } from '../../src/stores/sqlite.ts'
import { ConflictError, type Store } from '../../src/stores/store.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'

const NOW = Date.UTC(2026, 5, 1)
const DAY_MS = 86_400_000
const deps = (store: Store) => ({
  store,
  clock: { now: () => NOW },
  actor: { actor: 'cli:test' },
  audit: storeAuditSink(store, () => NOW),
})

function contract(name: string, open: () => Promise<Store>, skip: string | false = false) {
  describe(`admin store: ${name}`, { skip }, () => {
    let store: Store
    before(async () => {
      store = await open()
      assert.ok((await store.migrate()).includes(6))
    })
    after(() => store?.close())

    test('admin tokens: stored by hash only, found, listed, revoked once, expired', async () => {
      const { token, record } = await issueAdminToken(deps(store), {
        name: 'alice',
        role: 'operator',
        lifetimeMs: DAY_MS,
      })
      assert.match(token, /^tga_[0-9A-Za-z]{40}$/)
      assert.equal(record.tokenHash, hashAdminToken(token))
      assert.ok(!JSON.stringify(await store.admin.listAdminTokens()).includes(token))
      assert.deepEqual(await verifyAdminToken(store.admin, token, NOW), { ok: true, record })
      assert.deepEqual(await verifyAdminToken(store.admin, token, NOW + DAY_MS), {
        ok: false,
        reason: 'expired',
      })
      assert.deepEqual(
        await verifyAdminToken(
          store.admin,
          `${token.slice(0, -1)}${token.endsWith('x') ? 'y' : 'x'}`,
          NOW,
        ),
        {
          ok: false,
          reason: 'unknown',
        },
      )
      assert.deepEqual(await verifyAdminToken(store.admin, 'pat_x', NOW), {
        ok: false,
        reason: 'malformed',
      })
      await assert.rejects(store.admin.insertAdminToken(record), ConflictError)
      const first = await store.admin.revokeAdminToken(record.id, NOW + 5)
      const again = await store.admin.revokeAdminToken(record.id, NOW + 9)
      assert.equal(first?.revokedAt, NOW + 5)
      assert.equal(again?.revokedAt, NOW + 5)
      assert.equal(await store.admin.revokeAdminToken('adm_nope', NOW), undefined)
      assert.deepEqual(await verifyAdminToken(store.admin, token, NOW), {
        ok: false,
        reason: 'revoked',
      })
      const [event] = (await store.admin.searchAudit({ type: 'admin_token.issued' }, { limit: 5 }))
        .items
      assert.equal(event?.actor, 'cli:test')
      assert.ok(!JSON.stringify(event).includes(token))
    })

    test('PAT search across tenants: filters, literal wildcards, pages', async () => {
      for (const id of ['s-a', 's-b']) await store.createTenant({ id, name: id }, NOW)
      const make = (tenantId: string, subject: string, at: number, expiresAt: number | null) =>
        issuePat({ tenantId, subject, name: `n-${subject}`, permissions: [], expiresAt, now: at })
      const tokens = [
        make('s-a', 'alice_bot', NOW, NOW + 3 * DAY_MS),
        make('s-a', 'aliceXbot', NOW + 1, NOW + 30 * DAY_MS),
        make('s-b', '100%sure', NOW + 2, null),
        make('s-b', 'carol', NOW + 3, NOW + 2 * DAY_MS),
      ]
      for (const t of tokens) await store.insertPat(t.record)
      const subjects = async (search: Parameters<Store['admin']['searchPats']>[0]) =>
        (await store.admin.searchPats(search, { limit: 50 })).items.map((p) => p.subject)
      assert.deepEqual(await subjects({ subject: 'ALICE_' }), ['alice_bot'])
      assert.deepEqual(await subjects({ subject: '%' }), ['100%sure'])
      assert.deepEqual(await subjects({ tenantId: 's-b' }), ['carol', '100%sure'])
      assert.deepEqual(await subjects({ name: 'n-car' }), ['carol'])
      assert.deepEqual(await subjects({ last4: tokens[1]?.record.last4 }), ['aliceXbot'])
      assert.deepEqual(await subjects({ expiringBefore: NOW + 7 * DAY_MS }), ['carol', 'alice_bot'])
      await store.revokePat(tokens[3]?.record.id as string, NOW)
      assert.deepEqual(await subjects({ expiringBefore: NOW + 7 * DAY_MS }), ['alice_bot'])
      const first = await store.admin.searchPats({}, { limit: 3 })
      assert.equal(first.items.length, 3)
      const rest = await store.admin.searchPats(
        {},
        { limit: 3, cursor: first.nextCursor as string },
      )
      const ids = [...first.items, ...rest.items].map((p) => p.id)
      assert.equal(new Set(ids).size, ids.length)
      assert.ok(tokens.every((t) => ids.includes(t.record.id)))
    })

    test('audit search: tenant, type, actor, time window, pages', async () => {
      const event = (i: number, tenantId: string | null, type: string, actor: string) => ({
        id: `ev-${name}-${i}`,
        time: NOW + i * 1000,
        type,
        tenantId,
        actor,
        outcome: 'ok',
        clientAddress: null,
        requestId: null,
        details: { i },
      })
      await store.appendAudit(
        [
          event(1, 'a-t', 'tenant.created', 'admin:alice'),
          event(2, 'a-t', 'pat.issued', 'admin:alice'),
          event(3, 'b-t', 'pat.issued', 'oidc:dana'),
          event(4, null, 'auth.failed', 'pat_…abcd'),
        ],
        { queue: false },
      )
      const ids = async (search: Parameters<Store['admin']['searchAudit']>[0]) =>
        (await store.admin.searchAudit(search, { limit: 50 })).items
          .map((e) => e.id)
          .filter((id) => id.startsWith(`ev-${name}`))
      assert.deepEqual(await ids({ tenantId: 'a-t' }), [`ev-${name}-2`, `ev-${name}-1`])
      assert.deepEqual(await ids({ type: 'pat.issued' }), [`ev-${name}-3`, `ev-${name}-2`])
      assert.deepEqual(await ids({ actor: 'oidc:dana' }), [`ev-${name}-3`])
      assert.deepEqual(await ids({ since: NOW + 2000, until: NOW + 4000 }), [
        `ev-${name}-3`,
        `ev-${name}-2`,
      ])
      const page1 = await store.admin.searchAudit({ since: NOW + 1000 }, { limit: 2 })
      const page2 = await store.admin.searchAudit(
        { since: NOW + 1000 },
        { limit: 2, cursor: page1.nextCursor as string },
      )
      assert.deepEqual(
        [...page1.items, ...page2.items].map((e) => e.id),
        [4, 3, 2, 1].map((i) => `ev-${name}-${i}`),
      )
      assert.equal(page2.nextCursor, null)
    })
  })
}

contract('sqlite', async () => openSqliteStore(join(tempDir('tg-admin-store-'), 'db.sqlite')))

let postgres: PostgresServer | undefined
const pgSkip = skipReason('postgres')
contract(
  'postgres',
  async () => {
    postgres ??= await startPostgres()
    return openPostgresStore(await postgres.createDatabase(), { poolSize: 2 })
  },
  pgSkip,
)
after(() => postgres?.stop())
