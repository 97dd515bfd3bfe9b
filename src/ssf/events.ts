/**
 * The Security Event Token vocabulary tokengate sends and receives: CAEP 1.0 and SSF 1.0
 * event-type URIs (the keys of a SET's `events` claim, RFC 8417 §2.2) and the SSF delivery
 * method URNs. One list, shared by the receiver and the transmitter.
 */

/** CAEP 1.0 §3 event types. */
export const CAEP_EVENT = Object.freeze({
  sessionRevoked: 'https://schemas.openid.net/secevent/caep/event-type/session-revoked',
  credentialChange: 'https://schemas.openid.net/secevent/caep/event-type/credential-change',
  tokenClaimsChange: 'https://schemas.openid.net/secevent/caep/event-type/token-claims-change',
  assuranceLevelChange:
    'https://schemas.openid.net/secevent/caep/event-type/assurance-level-change',
  deviceComplianceChange:
    'https://schemas.openid.net/secevent/caep/event-type/device-compliance-change',
} as const)

/** SSF 1.0 §8.1 stream management event types. */
export const SSF_EVENT = Object.freeze({
  verification: 'https://schemas.openid.net/secevent/ssf/event-type/verification',
  streamUpdated: 'https://schemas.openid.net/secevent/ssf/event-type/stream-updated',
} as const)

/** SSF 1.0 §6.1 delivery methods: push (RFC 8935) and poll (RFC 8936). */
export const DELIVERY_METHOD = Object.freeze({
  push: 'urn:ietf:rfc:8935',
  poll: 'urn:ietf:rfc:8936',
} as const)

/** The `typ` header of a SET (RFC 8417 §2.3) and its media type (RFC 8935 §2). */
export const SET_TYP = 'secevent+jwt'
export const SET_MEDIA_TYPE = 'application/secevent+jwt'

/** Where a transmitter publishes its configuration (SSF 1.0 §7.1.1). */
export const SSF_CONFIGURATION_PATH = '/.well-known/ssf-configuration'
