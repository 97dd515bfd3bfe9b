/**
 * Whether the server queues audit events for delivery follows the webhook configuration:
 * without a webhook an audited request stores its event only (the outbox has no reader);
 * with one it is stored and queued, in the same transaction.
 */
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { describe, it } from 'node:test'
import { SQLITE_FILE_NAME } from '../../src/stores/open-store.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { startReceiver } from './receiver.ts'

/** Sends a garbage token (an audited 401), closes the server (flushing the audit writer). */
async function rejectAndClose(server: TestServer): Promise<string> {
  const response = await server.request('/api/v1/me', ['Authorization', 'Bearer garbage-token'])
  assert.equal(response.status, 401)
  await server.close()
  return String(response.headers['x-request-id'])
}

/** The stored audit row of `requestId` and its outbox entries, read from the closed file. */
function readBack(dataDir: string, requestId: string) {
  const db = new DatabaseSync(join(dataDir, SQLITE_FILE_NAME), { readOnly: true })
  try {
    const events = db
      .prepare('SELECT id, type, tenant_id FROM audit_events WHERE request_id = ?')
      .all(requestId)
    const queued = db
      .prepare(
        `SELECT o.event_id FROM event_outbox o JOIN audit_events a ON a.id = o.event_id
         WHERE a.request_id = ?`,
      )
      .all(requestId)
    return { events: events.map((r) => ({ ...r })), queued: queued.map((r) => r.event_id) }
  } finally {
    db.close()
  }
}

describe('audit events and the outbox', () => {
  it('without a webhook, a 401 is stored and not queued', async () => {
    const server = await startTestServer()
    const requestId = await rejectAndClose(server)
    const { events, queued } = readBack(server.dataDir, requestId)
    assert.equal(events.length, 1)
    assert.equal(events[0]?.type, 'auth.failed')
    assert.equal(events[0]?.tenant_id, null)
    assert.deepEqual(queued, [])
  })

  it('with a webhook, a 401 is stored and queued', async (t) => {
    // The receiver is down, so the event stays queued (retried) instead of being delivered.
    const receiver = await startReceiver()
    t.after(() => receiver.stop())
    await receiver.stop()
    const server = await startTestServer({
      events: { webhookUrl: receiver.url, webhookSecret: 'whsec_queue_test_secret' },
    })
    const requestId = await rejectAndClose(server)
    const { events, queued } = readBack(server.dataDir, requestId)
    assert.equal(events.length, 1)
    assert.deepEqual(queued, [events[0]?.id])
  })
})
