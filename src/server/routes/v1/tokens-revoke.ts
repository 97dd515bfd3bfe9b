import { refuse } from '../../../auth/edge-fastify.ts'
import { OperationRefused } from '../../../auth/operations.ts'
import { revokeTenantPat } from '../../../auth/pat-lifecycle.ts'
import { authorize } from '../../../core/authorize.ts'
import { credentialKindNamed } from '../../../core/credential-kinds.ts'
import type { PatRecord } from '../../../core/ports.ts'
import { principalOf, StoreUnavailableError, type V1Route } from '../route.ts'
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
      // Its own stored key, as the caller's credential kind says (a PAT's id; a JWT has none).
      const self = credentialKindNamed(principal.tokenType)?.storedKeyId(principal) === id
      // The permission is decided before the lookup, so a caller without it learns nothing
      // about which ids exist.
      const failure = self ? undefined : authorize(principal, REVOKE)
      if (failure) return refuse(request, reply, failure)

      const deps = {
        store: auth.store,
        clock: auth.clock,
        actor: {
          actor: principal.fingerprint,
          clientAddress: request.ip,
          requestId: String(request.id),
        },
        audit: auth.audit,
      }
      let revoked: PatRecord
      try {
        revoked = (await revokeTenantPat(deps, id, { tenantId: principal.tenantId, self })).record
      } catch (error) {
        if (error instanceof OperationRefused) return notFound(request, reply, 'token')
        throw new StoreUnavailableError(error)
      }
      auth.lookups.invalidatePat(revoked.tokenHash)
      return tokenView(revoked, auth.clock.now())
    },
}
