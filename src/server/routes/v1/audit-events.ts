import { pageRequest } from '../pagination.ts'
import { fromStore, principalOf, type V1Route } from '../route.ts'
import { AuditEventBody, PageQuery, pageOf } from './schemas.ts'

export const auditEventsRoute: V1Route = {
  operationId: 'listAuditEvents',
  method: 'GET',
  path: '/audit-events',
  summary: "The tenant's audit events",
  description: 'Newest first, cursor pagination.',
  permissions: ['audit:read'],
  schema: { querystring: PageQuery, response: { 200: pageOf(AuditEventBody) } },
  handler:
    ({ auth, config }) =>
    async (request) => {
      const { tenantId } = principalOf(request)
      const page = pageRequest(
        request.query as { limit?: number; cursor?: string },
        config.pagination,
      )
      const result = await fromStore(() => auth.store.listAudit(tenantId, page))
      return {
        items: result.items.map((e) => ({ ...e, time: new Date(e.time).toISOString() })),
        nextCursor: result.nextCursor,
      }
    },
}
