import { fromStore, principalOf, type V1Route } from '../route.ts'
import { notFound } from './not-found.ts'
import { IdParams, TokenMetadata } from './schemas.ts'
import { tokenView } from './token-view.ts'

export const tokensGetRoute: V1Route = {
  operationId: 'getToken',
  method: 'GET',
  path: '/tokens/:id',
  summary: "One of the tenant's PATs",
  permissions: ['tokens:read'],
  schema: { params: IdParams, response: { 200: TokenMetadata } },
  handler:
    ({ auth }) =>
    async (request, reply) => {
      const { tenantId } = principalOf(request)
      const { id } = request.params as { id: string }
      const record = await fromStore(() => auth.store.getPat(id))
      // Another tenant's token is reported exactly like a missing one: ids leak nothing.
      if (!record || record.tenantId !== tenantId) return notFound(request, reply, 'token')
      return tokenView(record, auth.clock.now())
    },
}
