import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { CAEP_EVENT } from '../../src/ssf/events.ts'
import {
  CREDENTIAL_CHANGE_AUDIT_TYPES,
  credentialChangeSet,
  credentialChangesOf,
} from '../../src/ssf/transmitter-events.ts'
import type { StoredAuditEvent } from '../../src/stores/store.ts'

const T = Date.UTC(2026, 0, 1)

function audit(
  type: string,
  details: Record<string, unknown>,
  actor = 'cli:ops',
): StoredAuditEvent {
  return {
    id: `evt-${type}`,
    time: T,
    type,
    tenantId: 'acme',
    actor,
    outcome: 'ok',
    clientAddress: null,
    requestId: null,
    details,
  }
}

describe('credential changes of audit events', () => {
  it('maps each key event to its change type and initiator', () => {
    const one = (event: StoredAuditEvent) =>
      credentialChangesOf(event).map((c) => [c.tokenId, c.changeType, c.initiatingEntity])
    assert.deepEqual(one(audit('pat.revoked', { tokenId: 'k1' })), [['k1', 'revoke', 'admin']])
    assert.deepEqual(one(audit('pat.revoked', { tokenId: 'k1', self: true }, 'hmac:0a1b2c3d')), [
      ['k1', 'revoke', 'user'],
    ])
    assert.deepEqual(one(audit('pat.revoked', { tokenId: 'k1' }, 'oidc:alice')), [
      ['k1', 'revoke', 'admin'],
    ])
    assert.deepEqual(
      one(audit('pat.leak_revoked', { tokenId: 'k2', source: 'github' }, 'github:secret-scanning')),
      [['k2', 'revoke', 'system']],
    )
    assert.deepEqual(one(audit('pat.leak_revoked', { tokenId: 'k2' })), [['k2', 'revoke', 'admin']])
    assert.deepEqual(
      one(audit('pat.reuse_detected', { tokenId: 'k3', revokedTokenIds: ['k3', 'k4'] }, 'hmac:1')),
      [
        ['k3', 'revoke', 'policy'],
        ['k4', 'revoke', 'policy'],
      ],
    )
    assert.deepEqual(one(audit('pat.disabled', { tokenId: 'k5' })), [['k5', 'update', 'admin']])
    assert.deepEqual(one(audit('pat.enabled', { tokenId: 'k5' })), [['k5', 'update', 'admin']])
    assert.deepEqual(
      one(audit('pat.updated', { tokenId: 'k6', before: { permissions: [] }, after: {} })),
      [['k6', 'update', 'admin']],
    )
  })

  it('an edit of other fields, and events that are no key change, make none', () => {
    assert.deepEqual(
      credentialChangesOf(audit('pat.updated', { tokenId: 'k', before: { name: 'a' }, after: {} })),
      [],
    )
    for (const type of ['pat.issued', 'pat.rotated', 'tenant.disabled', 'auth.failed']) {
      assert.deepEqual(credentialChangesOf(audit(type, { tokenId: 'k' })), [], type)
      assert.ok(!CREDENTIAL_CHANGE_AUDIT_TYPES.includes(type), type)
    }
  })

  it('the SET: CAEP claims, the key id as an opaque subject, a jti stable per audience', () => {
    const event = audit('pat.revoked', { tokenId: 'tok_1', subject: 'svc' })
    const [change] = credentialChangesOf(event)
    assert.ok(change)
    const context = { issuer: 'https://tg.example', audience: 'https://a.example', now: T + 5000 }
    const set = credentialChangeSet(event, change, context)
    assert.deepEqual(set, {
      iss: 'https://tg.example',
      aud: 'https://a.example',
      iat: (T + 5000) / 1000,
      jti: set.jti,
      txn: 'evt-pat.revoked',
      sub_id: { format: 'opaque', id: 'tok_1' },
      tenant_id: 'acme',
      events: {
        [CAEP_EVENT.credentialChange]: {
          credential_type: 'api_key',
          change_type: 'revoke',
          event_timestamp: T / 1000,
          initiating_entity: 'admin',
          reason_admin: { en: 'key revoked' },
        },
      },
    })
    const later = credentialChangeSet(event, change, { ...context, now: T + 60_000 })
    assert.equal(later.jti, set.jti, 'a retry keeps the jti')
    const other = credentialChangeSet(event, change, { ...context, audience: 'https://b.example' })
    assert.notEqual(other.jti, set.jti, 'each receiver its own jti')
  })
})
