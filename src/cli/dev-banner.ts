import { sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Config } from '../config/schema.ts'
import { mintDevJwt } from '../dev/issuer.ts'
import type { DevSeed } from '../dev/seed.ts'

/** One ready-to-paste command of the dev banner and the status it should answer. */
export interface DevCommand {
  readonly title: string
  /** Expected HTTP status, or null for a command that is not a request. */
  readonly expect: number | null
  readonly command: string
}

const JWT_TTL_SEC = 3600
const DEFAULT_DATA_DIR = '.tokengate'

/**
 * How the person who started the server runs the CLI: from an installed package (this file
 * sits under node_modules) the bin is `npx tokengate`; from a clone it is the npm script,
 * whose arguments follow `--`.
 */
export function cliInvocation(moduleUrl: string = import.meta.url): string {
  return fileURLToPath(moduleUrl).split(sep).includes('node_modules')
    ? 'npx tokengate'
    : 'npm run tokengate --'
}

/**
 * The dev-mode quick-start commands: a PAT call (only when the demo PAT was created on this
 * run; otherwise how to issue one), a JWT call with `X-Tenant-Id`, the same JWT without it
 * (401), and a JWT without permissions (403). The JWTs are minted now with the local dev
 * issuer, valid for one hour.
 *
 * Why tokens appear here at all: this is the dev quick start, printed to stdout for the
 * person who just started the server. They are never passed to the logger.
 */
export async function devCommands(
  config: Readonly<Config>,
  seed: DevSeed,
  url: string,
  now: number,
  cli: string = cliInvocation(),
): Promise<DevCommand[]> {
  const base = curlBase(url)
  const curl = config.server.plainHttp ? 'curl -i' : 'curl -k -i'
  const tenant = seed.tenantId
  const mint = (permissions: string[]) =>
    mintDevJwt(config.dataDir, {
      tenantId: tenant,
      subject: 'demo-user',
      permissions,
      ttlSec: JWT_TTL_SEC,
      now,
    })
  const jwt = await mint(['tokens:read'])
  const jwtWithout = await mint([])
  const bearer = (token: string) => `-H 'Authorization: Bearer ${token}'`
  const dataDirFlag = dataDirOption(config)
  const commands: DevCommand[] = []
  if (seed.demoPat !== undefined) {
    commands.push({
      title: 'A PAT call (the demo PAT is shown only now, on the first start)',
      expect: 200,
      command: `${curl} ${base}/api/v1/me ${bearer(seed.demoPat)}`,
    })
  } else {
    commands.push({
      title: 'A PAT call: the demo PAT was printed on the first start only; issue a new one',
      expect: null,
      command: `${cli}${dataDirFlag} pat issue --tenant ${tenant} --subject me --permission tokens:read`,
    })
    commands.push({
      title: 'then call the API with the pat_ token it prints',
      expect: 200,
      command: `${curl} ${base}/api/v1/me -H 'Authorization: Bearer pat_...'`,
    })
  }
  commands.push(
    {
      title: `A JWT call with X-Tenant-Id (permission tokens:read)`,
      expect: 200,
      command: `${curl} ${base}/api/v1/tokens ${bearer(jwt)} -H 'X-Tenant-Id: ${tenant}'`,
    },
    {
      title: 'The same JWT without X-Tenant-Id',
      expect: 401,
      command: `${curl} ${base}/api/v1/tokens ${bearer(jwt)}`,
    },
    {
      title: 'A JWT without permissions calling /api/v1/audit-events (needs audit:read)',
      expect: 403,
      command: `${curl} ${base}/api/v1/audit-events ${bearer(jwtWithout)} -H 'X-Tenant-Id: ${tenant}'`,
    },
  )
  return commands
}

/** The human banner around `devCommands`. */
export function formatDevBanner(
  commands: readonly DevCommand[],
  config: Readonly<Config>,
  cli: string = cliInvocation(),
): string {
  const lines = [
    'Dev mode: demo tenant, local JWT issuer' +
      (config.server.plainHttp ? '.' : ', self-signed certificate (hence curl -k).') +
      ' Not for production.',
    '',
  ]
  for (const { title, expect, command } of commands) {
    lines.push(`# ${title}${expect === null ? '' : ` -> ${expect}`}`, command, '')
  }
  lines.push(
    'The JWTs above expire in 1 hour. Mint more with:',
    `  ${cli}${dataDirOption(config)} jwt mint --dev --tenant demo --subject me --permission tokens:read`,
    '',
  )
  return lines.join('\n')
}

/** ` --data-dir DIR` when the data directory is not the default, so hints act on the same store. */
function dataDirOption(config: Readonly<Config>): string {
  return config.dataDir === DEFAULT_DATA_DIR ? '' : ` --data-dir ${shellQuote(config.dataDir)}`
}

/** The URL curl should call: a wildcard listen address is reached through loopback. */
function curlBase(url: string): string {
  const parsed = new URL(url)
  if (parsed.hostname === '0.0.0.0') parsed.hostname = '127.0.0.1'
  if (parsed.hostname === '[::]') parsed.hostname = '[::1]'
  return parsed.origin
}

function shellQuote(value: string): string {
  return /^[A-Za-z0-9_./-]+$/.test(value) ? value : `'${value.replaceAll("'", `'\\''`)}'`
}
