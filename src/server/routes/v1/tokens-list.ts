import { pageRequest } from '../pagination.ts'
import { fromStore, principalOf, type V1Route } from '../route.ts'
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
    async (request) => {
      const { tenantId } = principalOf(request)
      const page = pageRequest(
        request.query as { limit?: number; cursor?: string },
        config.pagination,
      )
      const result = await fromStore(() => auth.store.listPats(tenantId, page))
      const now = auth.clock.now()
      return { items: result.items.map((r) => tokenView(r, now)), nextCursor: result.nextCursor }
    },
}
