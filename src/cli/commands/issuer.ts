import { addIssuer, listIssuers, removeIssuer } from '../../auth/issuer-operations.ts'
import {
  DEFAULT_PERMISSIONS_CLAIM,
  defaultPermissionsFormat,
  type IssuerConfig,
  type KeySource,
  PERMISSIONS_FORMATS,
  type PermissionsFormat,
} from '../../core/issuer.ts'
import { checkJwksUrl as checkUrl, discoveryUrl } from '../../core/jwks.ts'
import { ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS } from '../../core/jwt-keys.ts'
import type { StoredIssuer } from '../../stores/store.ts'
import {
  optionalString,
  type ParsedArgs,
  requiredPositional,
  requiredString,
  stringList,
} from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, operate, operationDeps, withStore } from '../context.ts'
import { UsageError } from '../errors.ts'
import {
  jwksFileAlgorithms,
  readJwksFile,
  readJwksUrl,
  readPemFile,
  readSecretFile,
} from '../key-source.ts'
import { formatTime, isoTime } from '../output.ts'
import { checkTenantId, printable } from '../validate.ts'

const KEY_SOURCE_FLAGS = ['jwks-url', 'jwks-file', 'pem-file', 'secret-file', 'discovery'] as const
const CLAIM_NAME = /^[A-Za-z0-9_.:/-]{1,128}$/

/** An issuer as output shows it: key material summarised, a shared secret never shown. */
export function issuerJson(issuer: StoredIssuer) {
  return {
    issuer: issuer.issuer,
    audiences: issuer.audiences,
    keySource: keySourceSummary(issuer.keySource),
    algorithms: issuer.algorithms ?? null,
    tenant: issuer.tenant ?? null,
    permissionsClaim: issuer.permissionsClaim ?? null,
    permissionsFormat:
      issuer.permissionsFormat ??
      defaultPermissionsFormat(issuer.permissionsClaim ?? DEFAULT_PERMISSIONS_CLAIM),
    createdAt: isoTime(issuer.createdAt),
  }
}

function keySourceSummary(source: KeySource) {
  switch (source.kind) {
    case 'jwks':
      return {
        kind: source.kind,
        keys: source.jwks.keys.map((k) => ({ kid: k.kid ?? null, kty: k.kty, alg: k.alg })),
      }
    case 'jwks_url':
      return { kind: source.kind, url: source.url }
    case 'oidc_discovery':
      return { kind: source.kind }
    case 'pem':
      return { kind: source.kind, algorithm: source.algorithm, kid: source.kid ?? null }
    case 'secret':
      return { kind: source.kind, algorithm: source.algorithm }
    default:
      return source satisfies never
  }
}

function describeKeySource(source: KeySource): string {
  switch (source.kind) {
    case 'jwks':
      return `jwks (${source.jwks.keys.length} key${source.jwks.keys.length === 1 ? '' : 's'})`
    case 'jwks_url':
      return source.url
    case 'oidc_discovery':
      return `discovery (/.well-known/openid-configuration)${source.jwksOrigins?.length ? `, jwks_uri also on ${source.jwksOrigins.join(', ')}` : ''}`
    case 'pem':
      return `pem (${source.algorithm})`
    case 'secret':
      return `secret (${source.algorithm})`
    default:
      return source satisfies never
  }
}

function readKeySource(args: ParsedArgs, issuer: string): KeySource {
  const given = KEY_SOURCE_FLAGS.filter((name) => args.values[name] !== undefined)
  if (given.length !== 1) {
    throw new UsageError(
      `expected exactly one key source: --jwks-url, --jwks-file, --pem-file, --secret-file or --discovery (got ${given.length === 0 ? 'none' : given.map((f) => `--${f}`).join(' and ')})`,
    )
  }
  const algorithm = optionalString(args, 'algorithm')
  const source = given[0] as (typeof KEY_SOURCE_FLAGS)[number]
  if (source === 'discovery') {
    if (algorithm !== undefined) {
      throw new UsageError('--algorithm applies to --pem-file and --secret-file only')
    }
    return readDiscovery(issuer, stringList(args, 'jwks-origin'))
  }
  if (args.values['jwks-origin'] !== undefined) {
    throw new UsageError('--jwks-origin applies to --discovery only')
  }
  const value = requiredString(args, source, 'a value')
  if (algorithm !== undefined && (source === 'jwks-url' || source === 'jwks-file')) {
    throw new UsageError(
      `--algorithm applies to --pem-file and --secret-file only (a JWKS key is bound by its "alg", or by its type under --algorithms); use --algorithms for an allowlist`,
    )
  }
  switch (source) {
    case 'jwks-url':
      return readJwksUrl(value)
    case 'jwks-file':
      return readJwksFile(value, listedAlgorithms(args))
    case 'pem-file':
      return readPemFile(value, algorithm)
    case 'secret-file':
      return readSecretFile(value, algorithm)
  }
}

/**
 * `--discovery`: keys found from the issuer URL alone, at run time (not now: the provider
 * may be down while the operator registers it, and may move its `jwks_uri` later). The
 * issuer must be a URL discovery can use: https, or http on localhost/127.0.0.1 only.
 */
function readDiscovery(issuer: string, origins: readonly string[]): KeySource {
  try {
    discoveryUrl(issuer)
  } catch (error) {
    throw new UsageError(`--discovery: --issuer ${printable(issuer)}: ${(error as Error).message}`)
  }
  const jwksOrigins = origins.map((origin) => {
    try {
      const url = checkUrl(origin)
      if (url.href !== `${url.origin}/`) throw new Error('not an origin')
      return url.origin
    } catch {
      throw new UsageError(
        `--jwks-origin: '${printable(origin)}' is not an origin (expected e.g. https://keys.example.com; http on loopback only)`,
      )
    }
  })
  return jwksOrigins.length > 0
    ? { kind: 'oidc_discovery', jwksOrigins }
    : { kind: 'oidc_discovery' }
}

/** The `--algorithms` list as given (checked by {@link readAlgorithms}). */
function listedAlgorithms(args: ParsedArgs): readonly string[] | undefined {
  return optionalString(args, 'algorithms')
    ?.split(',')
    .map((a) => a.trim())
}

/**
 * The algorithm allowlist. `none` is refused outright; HMAC only with a shared secret (so a
 * public key can never be used as an HMAC secret: the classic algorithm-confusion attack).
 */
function readAlgorithms(args: ParsedArgs, source: KeySource): readonly string[] | undefined {
  const given = listedAlgorithms(args)
  const allowed: readonly string[] =
    source.kind === 'secret' ? HMAC_ALGORITHMS : ASYMMETRIC_ALGORITHMS
  for (const alg of given ?? []) {
    if (!allowed.includes(alg)) {
      throw new UsageError(
        `--algorithms: '${printable(alg)}' is not allowed with this key source (expected a comma-separated list of ${allowed.join(', ')})`,
      )
    }
  }
  if (source.kind === 'pem' || source.kind === 'secret') {
    if (given?.some((alg) => alg !== source.algorithm)) {
      throw new UsageError(
        `--algorithms: this key is bound to --algorithm ${source.algorithm} only`,
      )
    }
    return [source.algorithm]
  }
  // Each JWKS key was bound under `given` already (a key no listed algorithm fits is refused).
  if (source.kind === 'jwks') return given ?? jwksFileAlgorithms(source.jwks.keys)
  return given
}

function readClaim(args: ParsedArgs, name: string): string | undefined {
  const value = optionalString(args, name)
  if (value !== undefined && !CLAIM_NAME.test(value)) {
    throw new UsageError(
      `--${name}: '${printable(value)}' is not a claim name (expected 1-128 of A-Z a-z 0-9 _ . : / -)`,
    )
  }
  return value
}

export function readIssuerConfig(args: ParsedArgs): IssuerConfig {
  const issuer = requiredString(args, 'issuer', "the exact 'iss' value of the issuer's tokens")
  const audiences = [...new Set(stringList(args, 'audience'))]
  if (audiences.length === 0) {
    throw new UsageError(
      "missing --audience: expected an 'aud' value the tokens must carry (repeatable)",
    )
  }
  const keySource = readKeySource(args, issuer)
  const algorithms = readAlgorithms(args, keySource)
  const fixedTenant = optionalString(args, 'tenant')
  const tenantClaim = readClaim(args, 'tenant-claim')
  if (fixedTenant !== undefined && tenantClaim !== undefined) {
    throw new UsageError(
      'give either --tenant (a fixed tenant) or --tenant-claim (a claim name), not both',
    )
  }
  const tenant =
    fixedTenant !== undefined
      ? { fixed: checkTenantId(fixedTenant, '--tenant') }
      : tenantClaim !== undefined
        ? { claim: tenantClaim }
        : undefined
  const permissionsClaim = readClaim(args, 'permissions-claim')
  const permissionsFormat = readPermissionsFormat(args)
  return {
    issuer,
    audiences,
    keySource,
    ...(algorithms ? { algorithms } : {}),
    ...(tenant ? { tenant } : {}),
    ...(permissionsClaim ? { permissionsClaim } : {}),
    ...(permissionsFormat ? { permissionsFormat } : {}),
  }
}

function readPermissionsFormat(args: ParsedArgs): PermissionsFormat | undefined {
  const value = optionalString(args, 'permissions-format')
  if (value === undefined) return undefined
  if (!(PERMISSIONS_FORMATS as readonly string[]).includes(value)) {
    throw new UsageError(
      `--permissions-format: '${printable(value)}' is not a format (expected array or space-delimited)`,
    )
  }
  return value as PermissionsFormat
}

const add: CommandDef = {
  path: ['issuer', 'add'],
  summary: 'Trust a JWT issuer (insert, or replace one with the same --issuer)',
  synopsis:
    '--issuer ISS --audience AUD (--jwks-url URL | --discovery | --jwks-file F | --pem-file F --algorithm ALG | --secret-file F --algorithm HS256) [options]',
  description:
    'Exactly one key source. A JWKS URL must be https (http only for localhost/127.0.0.1). A JWKS\nkey without "alg" may verify the --algorithms its type fits (RSA: RS*/PS*; EC, Ed25519: their\none). A PEM file must hold a public key. The tenant comes from the claim tenant_id unless --tenant or --tenant-claim.',
  options: {
    issuer: { type: 'string', value: 'ISS', description: "Exact 'iss' value." },
    audience: {
      type: 'string',
      multiple: true,
      value: 'AUD',
      description: "Accepted 'aud' (repeatable).",
    },
    'jwks-url': { type: 'string', value: 'URL', description: 'Fetch keys from this JWKS URL.' },
    discovery: {
      type: 'boolean',
      description:
        "Find the JWKS from ISS/.well-known/openid-configuration at run time (its 'issuer' must equal ISS).",
    },
    'jwks-origin': {
      type: 'string',
      multiple: true,
      value: 'ORIGIN',
      description:
        "With --discovery: another origin the document's jwks_uri may use (repeatable; default: the issuer's origin only).",
    },
    'jwks-file': {
      type: 'string',
      value: 'FILE',
      description: 'Keys from a local JWKS (JSON) file.',
    },
    'pem-file': {
      type: 'string',
      value: 'FILE',
      description: 'One PEM public key (needs --algorithm).',
    },
    'secret-file': {
      type: 'string',
      value: 'FILE',
      description: 'Shared secret (HS256/384/512; needs --algorithm).',
    },
    algorithm: {
      type: 'string',
      value: 'ALG',
      description: 'Algorithm of the PEM key or the secret.',
    },
    algorithms: {
      type: 'string',
      value: 'A,B',
      description:
        "Algorithm allowlist (default: the keys' algorithms, or RS256,PS256,ES256,EdDSA).",
    },
    tenant: {
      type: 'string',
      value: 'ID',
      description: 'Every token of this issuer acts for this tenant.',
    },
    'tenant-claim': {
      type: 'string',
      value: 'NAME',
      description: 'Claim holding the tenant (default tenant_id).',
    },
    'permissions-claim': {
      type: 'string',
      value: 'NAME',
      description:
        'Claim holding permissions (default permissions; scope/scp are read as OAuth scopes).',
    },
    'permissions-format': {
      type: 'string',
      value: 'FORMAT',
      description:
        'array or space-delimited: the one type the permissions claim may have (default: space-delimited for scope/scp, else array).',
    },
  },
  examples: [
    'tokengate issuer add --issuer https://login.example.com/ --audience api://tokengate --jwks-url https://login.example.com/.well-known/jwks.json',
    'tokengate issuer add --issuer https://login.example.com --audience tokengate --discovery',
    'tokengate issuer add --issuer local --audience tokengate --pem-file issuer.pub.pem --algorithm ES256 --tenant acme',
  ],
  async run(ctx) {
    const issuer = readIssuerConfig(ctx.args)
    const { issuer: stored, replaced } = await withStore(
      ctx.config(ADMIN_OVERRIDES),
      (store) =>
        operate(() => addIssuer(operationDeps(ctx, store), issuer), {
          tenant_unknown: (r) =>
            `no tenant ${r.subject} (create it with: tokengate tenant create ${r.subject})`,
        }),
      ctx.io,
    )
    if (ctx.json) ctx.out.json({ ...issuerJson(stored), replaced })
    else {
      ctx.out.line(`${replaced ? 'Replaced' : 'Added'} issuer ${issuer.issuer}.`)
      ctx.out.line(`  audiences:   ${issuer.audiences.join(', ')}`)
      ctx.out.line(`  keys:        ${describeKeySource(issuer.keySource)}`)
      ctx.out.line(`  algorithms:  ${issuer.algorithms?.join(', ') ?? 'default'}`)
    }
    return 0
  },
}

const list: CommandDef = {
  path: ['issuer', 'list'],
  summary: 'List trusted JWT issuers',
  options: {},
  async run(ctx) {
    const issuers = await withStore(ctx.config(ADMIN_OVERRIDES), (store) => listIssuers({ store }))
    if (ctx.json) {
      ctx.out.json({ issuers: issuers.map(issuerJson) })
      return 0
    }
    ctx.out.table(
      ['ISSUER', 'AUDIENCES', 'KEYS', 'ALGORITHMS', 'TENANT', 'PERMISSIONS CLAIM', 'ADDED'],
      issuers.map((i) => [
        i.issuer,
        i.audiences.join(','),
        describeKeySource(i.keySource),
        i.algorithms?.join(',') ?? 'default',
        !i.tenant
          ? 'claim tenant_id'
          : 'fixed' in i.tenant
            ? i.tenant.fixed
            : `claim ${i.tenant.claim}`,
        `${i.permissionsClaim ?? DEFAULT_PERMISSIONS_CLAIM} (${i.permissionsFormat ?? defaultPermissionsFormat(i.permissionsClaim ?? DEFAULT_PERMISSIONS_CLAIM)})`,
        formatTime(i.createdAt),
      ]),
    )
    return 0
  },
}

const remove: CommandDef = {
  path: ['issuer', 'remove'],
  summary: 'Stop trusting a JWT issuer',
  synopsis: 'ISS',
  options: {},
  positionals: 1,
  examples: ['tokengate issuer remove https://login.example.com/'],
  async run(ctx) {
    const issuer = requiredPositional(ctx.args, 0, 'ISS')
    await withStore(ctx.config(ADMIN_OVERRIDES), (store) =>
      operate(() => removeIssuer(operationDeps(ctx, store), issuer), {
        issuer_unknown: () => `no issuer ${printable(issuer)} (see: tokengate issuer list)`,
      }),
    )
    if (ctx.json) ctx.out.json({ issuer, removed: true })
    else ctx.out.line(`Removed issuer ${issuer}.`)
    return 0
  },
}

/** `issuer add|list|remove`. */
export const issuerCommands: readonly CommandDef[] = [add, list, remove]
