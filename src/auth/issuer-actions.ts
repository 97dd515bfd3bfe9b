import type { IssuerConfig } from '../core/issuer.ts'
import { createJwtVerifier } from '../core/jwt.ts'
import type { Store } from '../stores/store.ts'
import { OperationError } from './operation-error.ts'
import { type OperatorContext, operatorEvent } from './operator-audit.ts'

/**
 * Adds (or replaces) a trusted issuer after the core's own checks: building a verifier for
 * it validates the algorithms, key source and claims exactly as the server will. Audited
 * `issuer.added`.
 */
export async function addIssuer(
  store: Pick<Store, 'listIssuers' | 'putIssuer' | 'appendAudit'>,
  issuer: IssuerConfig,
  op: OperatorContext,
): Promise<{ replaced: boolean }> {
  try {
    createJwtVerifier([issuer]).close?.()
  } catch (error) {
    throw new OperationError('invalid', `issuer: ${(error as Error).message}`)
  }
  const replaced = (await store.listIssuers()).some((i) => i.issuer === issuer.issuer)
  await store.putIssuer(issuer, op.now)
  await store.appendAudit([
    operatorEvent(op, 'issuer.added', null, {
      issuer: issuer.issuer,
      audiences: issuer.audiences,
      keySource: issuer.keySource.kind,
      algorithms: issuer.algorithms ?? null,
      replaced,
    }),
  ])
  return { replaced }
}

/** Removes a trusted issuer; audited `issuer.removed`. */
export async function removeIssuer(
  store: Pick<Store, 'removeIssuer' | 'appendAudit'>,
  issuer: string,
  op: OperatorContext,
): Promise<void> {
  if (!(await store.removeIssuer(issuer))) {
    throw new OperationError('not_found', 'no such issuer')
  }
  await store.appendAudit([operatorEvent(op, 'issuer.removed', null, { issuer })])
}
