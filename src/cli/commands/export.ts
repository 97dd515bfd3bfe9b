/**
 * `tokengate export --out DIR`: the store's tenants, trusted issuers and stored gateway
 * policy as `DIR/tokengate.apply.yaml`, a file `apply` accepts (applying it to the same store
 * plans nothing), plus the PATs (metadata and their own settings). Key material an issuer was given as
 * a file (JWKS, PEM) is written beside it under `DIR/keys/`, since `apply` takes keys from
 * files. Never a secret: a PAT is metadata only (no hash either), and an HMAC issuer's shared
 * secret is not written: its entry names `keys/<n>.secret`, which the operator supplies.
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parse, stringify } from 'yaml'
import { GATEWAY_POLICY } from '../../auth/policy/reload.ts'
import type { IssuerConfig } from '../../core/issuer.ts'
import type { Store } from '../../stores/store.ts'
import { requiredString } from '../args.ts'
import { ADMIN_OVERRIDES, type CommandDef, withStore } from '../context.ts'
import { formatRate } from '../key-options.ts'
import { counted } from '../output.ts'
import { keyEntryOf } from './apply-keys.ts'

const exportCommand: CommandDef = {
  path: ['export'],
  summary: 'Write tenants, issuers and the stored policy as a file apply accepts',
  synopsis: '--out DIR',
  description:
    'Writes DIR/tokengate.apply.yaml (tenants, issuers, the stored gateway policy, and the PATs\nunder keys:, their settings, which apply edits but never creates or revokes) and the issuers key files under\nDIR/keys/. No secret is written: an HMAC issuer entry names keys/N.secret for you to supply.\n`tokengate apply -f DIR/tokengate.apply.yaml --dry-run` on the same store then plans nothing.',
  options: {
    out: { type: 'string', value: 'DIR', description: 'Directory to write (created).' },
  },
  examples: [
    'tokengate export --out gitops/ && tokengate apply -f gitops/tokengate.apply.yaml --dry-run',
  ],
  async run(ctx) {
    const out = requiredString(ctx.args, 'out', 'a directory to write the export to')
    const exported = await withStore(ctx.config(ADMIN_OVERRIDES), (store) => collect(store))
    await mkdir(join(out, 'keys'), { recursive: true, mode: 0o700 })
    const issuers = []
    const missingSecrets: string[] = []
    for (const [index, issuer] of exported.issuers.entries()) {
      const { entry, file } = issuerEntry(issuer, `keys/issuer-${index + 1}`)
      if (file?.content !== undefined) {
        await writeFile(join(out, file.path), file.content, { mode: 0o600 })
      } else if (file) missingSecrets.push(`${issuer.issuer}: ${join(out, file.path)}`)
      issuers.push(entry)
    }
    const document = {
      tenants: exported.tenants,
      issuers,
      ...(exported.policy ? { gateway: { policy: exported.policy } } : {}),
      keys: exported.keys,
    }
    const file = join(out, 'tokengate.apply.yaml')
    await writeFile(file, stringify(document), { mode: 0o600 })
    if (ctx.json) ctx.out.json({ file, missingSecrets })
    else {
      ctx.out.line(
        `Wrote ${file}: ${counted(exported.tenants.length, 'tenant')}, ${counted(issuers.length, 'issuer')}, ${counted(exported.keys.length, 'key')} (no secret)${exported.policy ? ', the stored policy' : ''}.`,
      )
      for (const missing of missingSecrets) {
        ctx.out.line(`Shared secret not exported (supply it before applying): ${missing}`)
      }
    }
    return 0
  },
}

async function collect(store: Store) {
  const tenants = await store.listTenants()
  const keys = []
  for (const tenant of tenants) {
    let cursor: string | undefined
    do {
      const page = await store.listPats(tenant.id, { limit: 200, cursor })
      for (const pat of page.items) keys.push(keyEntryOf(pat))
      cursor = page.nextCursor ?? undefined
    } while (cursor !== undefined)
  }
  const stored = await store.getPolicy(GATEWAY_POLICY)
  return {
    tenants: tenants.map((t) => ({
      id: t.id,
      name: t.name,
      enabled: t.enabled,
      ...(t.rateLimit ? { rateLimit: formatRate(t.rateLimit) } : {}),
    })),
    issuers: await store.listIssuers(),
    policy: stored ? (parse(stored.text) as unknown) : undefined,
    keys,
  }
}

/** The `issuer add` options that recreate `issuer`, and the key file they name. */
function issuerEntry(
  issuer: IssuerConfig,
  base: string,
): { entry: Record<string, unknown>; file?: { path: string; content: string | undefined } } {
  const entry: Record<string, unknown> = { issuer: issuer.issuer, audience: [...issuer.audiences] }
  let file: { path: string; content: string | undefined } | undefined
  const source = issuer.keySource
  switch (source.kind) {
    case 'jwks_url':
      entry['jwks-url'] = source.url
      break
    case 'oidc_discovery':
      entry.discovery = true
      if (source.jwksOrigins?.length) entry['jwks-origin'] = [...source.jwksOrigins]
      break
    case 'jwks':
      file = { path: `${base}.jwks.json`, content: `${JSON.stringify(source.jwks, null, 2)}\n` }
      entry['jwks-file'] = file.path
      break
    case 'pem':
      file = { path: `${base}.pem`, content: source.pem }
      entry['pem-file'] = file.path
      entry.algorithm = source.algorithm
      break
    case 'secret':
      // Never exported: whoever reads the export could mint any token of this issuer.
      file = { path: `${base}.secret`, content: undefined }
      entry['secret-file'] = file.path
      entry.algorithm = source.algorithm
      break
    default:
      return source satisfies never
  }
  if (issuer.algorithms) entry.algorithms = [...issuer.algorithms]
  if (issuer.tenant && 'fixed' in issuer.tenant) entry.tenant = issuer.tenant.fixed
  else if (issuer.tenant) entry['tenant-claim'] = issuer.tenant.claim
  if (issuer.permissionsClaim) entry['permissions-claim'] = issuer.permissionsClaim
  if (issuer.permissionsFormat) entry['permissions-format'] = issuer.permissionsFormat
  return file ? { entry, file } : { entry }
}

/** `export`. */
export const exportCommands: readonly CommandDef[] = [exportCommand]
