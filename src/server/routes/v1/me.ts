import Type from 'typebox'
import { principalOf, type V1Route } from '../route.ts'
import { iso } from './schemas.ts'

const Me = Type.Object(
  {
    tenantId: Type.String(),
    subject: Type.String(),
    tokenType: Type.Union([Type.Literal('pat'), Type.Literal('jwt')]),
    tokenId: Type.Union([Type.String(), Type.Null()]),
    issuer: Type.Union([Type.String(), Type.Null()]),
    permissions: Type.Array(Type.String()),
    expiresAt: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
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
  handler: () => async (request) => {
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
