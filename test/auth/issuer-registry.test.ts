import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { createIssuerRegistry } from '../../src/auth/issuer-registry.ts'
import type { StoredIssuer } from '../../src/stores/store.ts'
import { createTestIssuer } from '../helpers/jwt.ts'

describe('issuer registry reloads', () => {
  test('a failed re-read is reported (reloadFailing), logged once, and retried until the new set is in force', async () => {
    const kept = createTestIssuer({ issuer: 'https://kept.test' })
    const removed = createTestIssuer({ issuer: 'https://removed.test' })
    const stored = (i: typeof kept): StoredIssuer => ({ ...i.config, createdAt: 0 })
    let list: StoredIssuer[] = [stored(kept), stored(removed)]
    let failures = 0
    const store = {
      async listIssuers() {
        if (failures > 0) {
          failures--
          throw new Error('the store blinked')
        }
        return list
      },
    }
    const errors: unknown[] = []
    const registry = await createIssuerRegistry(store, {}, (error) => errors.push(error))
    try {
      const token = await removed.sign()
      assert.equal((await registry.verify(token)).ok, true)
      // The issuer is removed, but reading the set fails twice: the old set stays in force,
      // visibly, and the read is retried without waiting for another change.
      list = [stored(kept)]
      failures = 2
      await registry.reload()
      assert.equal(registry.reloadFailing(), true)
      assert.equal((await registry.verify(token)).ok, true, 'the previous set is in force')
      const deadline = Date.now() + 5000
      while (registry.reloadFailing() && Date.now() < deadline) await sleep(50)
      assert.equal(registry.reloadFailing(), false, 'retried until it succeeded')
      assert.equal(errors.length, 1, 'one log line per episode')
      const refused = await registry.verify(token)
      assert.equal(refused.ok, false)
      assert.equal((await registry.verify(await kept.sign())).ok, true)
    } finally {
      registry.close()
    }
  })
})
