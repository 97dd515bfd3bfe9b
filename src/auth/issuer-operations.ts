import { type IssuerConfig, PERMISSIONS_FORMATS } from '../core/issuer.ts'
import { checkIssuerConfig } from '../core/jwt.ts'
import type { StoredIssuer } from '../stores/store.ts'
import { audit, type OperationDeps, OperationRefused } from './operations.ts'

function fixedTenant(issuer: IssuerConfig): string | null {
  return issuer.tenant && 'fixed' in issuer.tenant ? issuer.tenant.fixed : null
}

/**
 * Trusts an issuer (insert, or replace the one with the same `issuer`) and audits
 * `issuer.added`. The configuration is checked by the core's own rules first, so a key the
 * server would refuse at start is refused here (`invalid_input`, with the core's message).
 */
export async function addIssuer(
  deps: OperationDeps,
  issuer: IssuerConfig,
): Promise<{ readonly issuer: StoredIssuer; readonly replaced: boolean }> {
  checkIssuerShape(issuer)
  try {
    checkIssuerConfig(issuer)
  } catch (error) {
    // The core's own refusals are sentences for the operator; anything else (a TypeError from
    // a value of a type no caller should pass) is not, and its text stays out of the answer.
    const message =
      error instanceof Error && error.constructor === Error
        ? error.message
        : 'the issuer configuration is malformed'
    throw new OperationRefused('invalid_input', issuer.issuer, message)
  }
  const fixed = fixedTenant(issuer)
  if (fixed !== null && !(await deps.store.findTenant(fixed))) {
    throw new OperationRefused('tenant_unknown', fixed, `no tenant ${fixed}`)
  }
  const replaced = (await deps.store.listIssuers()).some((i) => i.issuer === issuer.issuer)
  const now = deps.clock.now()
  await deps.store.putIssuer(issuer, now)
  await audit(deps, {
    type: 'issuer.added',
    tenantId: fixed,
    details: {
      issuer: issuer.issuer,
      audiences: issuer.audiences,
      keySource: issuer.keySource.kind,
      algorithms: issuer.algorithms ?? null,
      replaced,
    },
  })
  return { issuer: { ...issuer, createdAt: now }, replaced }
}

/** Stops trusting an issuer and audits `issuer.removed`. */
export async function removeIssuer(deps: OperationDeps, issuer: string): Promise<StoredIssuer> {
  const existing = (await deps.store.listIssuers()).find((i) => i.issuer === issuer)
  if (!existing || !(await deps.store.removeIssuer(issuer))) {
    throw new OperationRefused('issuer_unknown', issuer, `no issuer ${issuer}`)
  }
  await audit(deps, {
    type: 'issuer.removed',
    tenantId: fixedTenant(existing),
    details: { issuer },
  })
  return existing
}

export function listIssuers(deps: Pick<OperationDeps, 'store'>): Promise<readonly StoredIssuer[]> {
  return deps.store.listIssuers()
}

/**
 * The shape of an issuer configuration as an untrusted caller may send it (the admin API's
 * JSON, an applied file): every field of the right type for its key source, before the core
 * checks what the values mean. Refused as `invalid_input`, naming the field.
 */
export function checkIssuerShape(value: unknown): asserts value is IssuerConfig {
  const refuse = (field: string, expected: string): never => {
    throw new OperationRefused('invalid_input', field, `${field}: expected ${expected}`)
  }
  const isString = (v: unknown): v is string => typeof v === 'string' && v.length > 0
  const strings = (v: unknown) => Array.isArray(v) && v.length > 0 && v.every(isString)
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return refuse('issuer', 'an object with issuer, audiences and keySource')
  }
  const issuer = value as Record<string, unknown>
  if (!isString(issuer.issuer)) refuse('issuer', 'the exact iss value, a non-empty string')
  if (!strings(issuer.audiences)) refuse('audiences', 'a list of non-empty strings')
  if (issuer.algorithms !== undefined && !strings(issuer.algorithms)) {
    refuse('algorithms', 'a list of algorithm names')
  }
  if (issuer.permissionsClaim !== undefined && !isString(issuer.permissionsClaim)) {
    refuse('permissionsClaim', 'a claim name')
  }
  if (
    issuer.permissionsFormat !== undefined &&
    !PERMISSIONS_FORMATS.includes(issuer.permissionsFormat as never)
  ) {
    refuse('permissionsFormat', PERMISSIONS_FORMATS.join(' or '))
  }
  const tenant = issuer.tenant as Record<string, unknown> | undefined
  if (
    tenant !== undefined &&
    !(
      tenant !== null &&
      typeof tenant === 'object' &&
      (isString(tenant.claim) || isString(tenant.fixed))
    )
  ) {
    refuse('tenant', '{ "claim": NAME } or { "fixed": TENANT_ID }')
  }
  const source = issuer.keySource as Record<string, unknown> | undefined
  if (source === null || typeof source !== 'object') {
    return refuse('keySource', 'an object with kind jwks, jwks_url, oidc_discovery, pem or secret')
  }
  switch (source.kind) {
    case 'jwks': {
      const keys = (source.jwks as { keys?: unknown } | null | undefined)?.keys
      if (!Array.isArray(keys) || !keys.every((k) => k !== null && typeof k === 'object')) {
        refuse('keySource.jwks', 'a JWKS: { "keys": [ JWK, ... ] }')
      }
      return
    }
    case 'jwks_url':
      if (!isString(source.url)) refuse('keySource.url', 'an https URL')
      return
    case 'oidc_discovery':
      if (source.jwksOrigins !== undefined && !strings(source.jwksOrigins)) {
        refuse('keySource.jwksOrigins', 'a list of origins')
      }
      return
    case 'pem':
      if (!isString(source.pem)) refuse('keySource.pem', 'a PEM public key')
      if (!isString(source.algorithm))
        refuse('keySource.algorithm', 'an algorithm name, e.g. ES256')
      if (source.kid !== undefined && !isString(source.kid)) refuse('keySource.kid', 'a key id')
      return
    case 'secret':
      if (!isString(source.secret)) refuse('keySource.secret', 'a base64url shared secret')
      if (!isString(source.algorithm)) refuse('keySource.algorithm', 'HS256, HS384 or HS512')
      return
    default:
      refuse('keySource.kind', 'jwks, jwks_url, oidc_discovery, pem or secret')
  }
}
