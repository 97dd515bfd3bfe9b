import { principalOf, type V1Route } from '../route.ts'
import { array, iso, literals, nullable, object, string } from './schemas.ts'

const Me = object(
  {
    tenantId: string(),
    subject: string(),
    tokenType: literals('pat', 'jwt'),
    tokenId: nullable(string()),
    issuer: nullable(string()),
    permissions: array(string()),
    expiresAt: nullable(string({ format: 'date-time' })),
  },
  { additionalProperties: false },
)

export const meRoute: V1Route = {
  operationId: 'getMe',
  method: 'GET',
  path: '/me',
  summary: 'The authenticated caller',
  description: 'Tenant, subject, token type, permissions and expiry of the calling token.',
  permissions: [],
  schema: { response: { 200: Me } },
  // Synchronous: an async handler costs every /me a promise and a microtask turn.
  handler: () => (request) => {
    const p = principalOf(request)
    return {
      tenantId: p.tenantId,
      subject: p.subject,
      tokenType: p.tokenType,
      tokenId: p.tokenId ?? null,
      issuer: p.issuer ?? null,
      permissions: [...p.permissions],
      expiresAt: iso(p.expiresAt),
    }
  },
}
