import { authorize } from '../../../core/authorize.ts'
import { sendFailure } from '../../plugin.ts'
import { fromStore, principalOf, type V1Route } from '../route.ts'
import { notFound } from './not-found.ts'
import { IdParams, TokenMetadata } from './schemas.ts'
import { tokenView } from './token-view.ts'

const REVOKE = ['tokens:revoke'] as const

export const tokensRevokeRoute: V1Route = {
  operationId: 'revokeToken',
  method: 'DELETE',
  path: '/tokens/:id',
  summary: 'Revoke a PAT',
  description:
    'Needs `tokens:revoke`, except that a PAT may always revoke itself. Idempotent: revoking a revoked token returns it unchanged.',
  // Checked in the handler: the "a PAT may revoke itself" exception depends on the path id.
  permissions: [],
  schema: { params: IdParams, response: { 200: TokenMetadata } },
  handler:
    ({ auth }) =>
    async (request, reply) => {
      const principal = principalOf(request)
      const { id } = request.params as { id: string }
      const self = principal.tokenType === 'pat' && principal.tokenId === id
      // The permission is decided before the lookup, so a caller without it learns nothing
      // about which ids exist.
      const failure = self ? undefined : authorize(principal, REVOKE)
      if (failure) return sendFailure(request, reply, failure)

      const existing = await fromStore(() => auth.store.getPat(id))
      if (!existing || existing.tenantId !== principal.tenantId) {
        return notFound(request, reply, 'token')
      }
      const revoked =
        (await fromStore(() => auth.store.revokePat(id, auth.clock.now()))) ?? existing
      auth.lookups.invalidatePat(revoked.tokenHash)
      if (existing.revokedAt === null) {
        auth.audit.write({
          type: 'pat.revoked',
          tenantId: principal.tenantId,
          actor: principal.fingerprint,
          outcome: 'ok',
          clientAddress: request.ip,
          requestId: String(request.id),
          details: { tokenId: id, self },
        })
      }
      return tokenView(revoked, auth.clock.now())
    },
}
