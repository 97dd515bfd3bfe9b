import { listForTenant, type V1Route } from '../route.ts'
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
    (request) =>
      listForTenant(
        request,
        config.pagination,
        (tenantId, page) => auth.store.listAudit(tenantId, page),
        (event) => ({ ...event, time: new Date(event.time).toISOString() }),
      ),
}
