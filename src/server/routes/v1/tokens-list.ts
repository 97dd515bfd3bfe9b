import { listForTenant, type V1Route } from '../route.ts'
import { PageQuery, pageOf, TokenMetadata } from './schemas.ts'
import { tokenView } from './token-view.ts'

export const tokensListRoute: V1Route = {
  operationId: 'listTokens',
  method: 'GET',
  path: '/tokens',
  summary: "The caller's tenant's PATs",
  description: 'Metadata only, newest first, cursor pagination.',
  permissions: ['tokens:read'],
  schema: { querystring: PageQuery, response: { 200: pageOf(TokenMetadata) } },
  handler:
    ({ auth, config }) =>
    (request) => {
      const now = auth.clock.now()
      return listForTenant(
        request,
        config.pagination,
        (tenantId, page) => auth.store.listPats(tenantId, page),
        (record) => tokenView(record, now),
      )
    },
}
