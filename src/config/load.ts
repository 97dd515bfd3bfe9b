import { closeSync, existsSync, openSync, readFileSync, readSync } from 'node:fs'
import { createRequire } from 'node:module'
import { extname, isAbsolute } from 'node:path'
import { addressBlockProblem } from '../http/address-blocks.ts'
import { IDENTITY_PREFIX } from '../http/identity-headers.ts'
import { didYouMeanSetting, howToSet, patternInWords } from './hints.ts'
import { applyDefaults, convert, validationErrors } from './json-schema.ts'
import { type Config, ConfigSchema, PROXY_KINDS, type ProxyKind } from './schema.ts'

/** Thrown with every problem found, one per line, so an operator fixes them in one pass. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError'
  readonly problems: readonly string[]
  /** Every problem is in a value of `overrides` (for the CLI: its flags, a usage error). */
  readonly fromOverrides: boolean
  constructor(problems: readonly string[], fromOverrides = false) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`)
    this.problems = problems
    this.fromOverrides = fromOverrides
  }
}

type Json = Record<string, unknown>

export interface LoadOptions {
  /** Path of a JSON or YAML config file. */
  file?: string | undefined
  /** Environment to read (defaults to process.env). */
  env?: Readonly<Record<string, string | undefined>>
  /** Highest-precedence values, e.g. from command-line flags, in the schema's shape. */
  overrides?: Json
}

/**
 * Environment variables and the config path each sets. Values are strings; the schema
 * converts them (`TOKENGATE_DEV=true`, `TOKENGATE_PORT=9443`).
 */
export const ENV_VARIABLES: Readonly<Record<string, string>> = {
  TOKENGATE_CONFIG: '(config file path)',
  TOKENGATE_DATA_DIR: 'dataDir',
  TOKENGATE_SECRET_KEY_FILE: 'secretKeyFile',
  TOKENGATE_DEV: 'dev',
  DATABASE_URL: 'databaseUrl',
  DATABASE_LISTEN_URL: 'databaseListenUrl',
  REDIS_URL: 'redisUrl',
  TOKENGATE_HOST: 'server.host',
  TOKENGATE_PORT: 'server.port',
  TOKENGATE_PLAIN_HTTP: 'server.plainHttp',
  TOKENGATE_TLS_CERT_FILE: 'server.tlsCertFile',
  TOKENGATE_TLS_KEY_FILE: 'server.tlsKeyFile',
  TOKENGATE_CLIENT_CA_FILE: 'server.clientCertificates.caFile',
  TOKENGATE_CLIENT_CERTIFICATES: 'server.clientCertificates.mode',
  TOKENGATE_TRUST_PROXY: 'server.trustProxy',
  TOKENGATE_WORKERS: 'server.workers',
  TOKENGATE_LOG_LEVEL: 'log.level',
  TOKENGATE_EVENTS_WEBHOOK_URL: 'events.webhookUrl',
  TOKENGATE_EVENTS_WEBHOOK_SECRET: 'events.webhookSecret',
  TOKENGATE_METRICS_ENABLED: 'metrics.enabled',
  TOKENGATE_METRICS_HOST: 'metrics.host',
  TOKENGATE_METRICS_PORT: 'metrics.port',
  TOKENGATE_TRACING_ENABLED: 'tracing.enabled',
  TOKENGATE_ADMIN_ENABLED: 'admin.enabled',
  TOKENGATE_ADMIN_HOST: 'admin.host',
  TOKENGATE_ADMIN_PORT: 'admin.port',
  TOKENGATE_UPSTREAM: 'gateway.upstream',
  TOKENGATE_POLICY_FILE: 'gateway.policyFile',
}

/**
 * Variables that can carry a secret (a password in a URL, a webhook's key or capability URL).
 * Each can instead be given as `<NAME>_FILE`, the path of a file holding the value, as
 * container platforms mount secrets, so that the secret is not in the process environment.
 * The other secrets are files already (secretKeyFile, server.tlsKeyFile,
 * identityToken.keysFile); admin tokens live in the store.
 */
export const SECRET_ENV_VARIABLES: readonly string[] = [
  'DATABASE_URL',
  'DATABASE_LISTEN_URL',
  'REDIS_URL',
  'TOKENGATE_EVENTS_WEBHOOK_URL',
  'TOKENGATE_EVENTS_WEBHOOK_SECRET',
]

/**
 * Loads, merges, converts, defaults and validates the configuration once, reporting every
 * bad path, and returns it deep-frozen. Nothing else in tokengate reads `process.env`.
 */
export function loadConfig(options: LoadOptions = {}): Readonly<Config> {
  const { env, fromFiles } = withSecretFiles(options.env ?? process.env)
  const file = options.file ?? env.TOKENGATE_CONFIG
  let merged: Json = {}
  if (file) merged = deepMerge(merged, readConfigFile(file))
  merged = deepMerge(merged, fromEnv(env))
  // Copied: defaults are filled in place below, and the caller's object must stay untouched.
  if (options.overrides) merged = deepMerge(merged, structuredClone(options.overrides))

  const sourceOf = createSourceFinder(file, env, fromFiles, options.overrides)
  const converted = convert(ConfigSchema, merged)
  const withDefaults = applyDefaults(ConfigSchema, converted) as Json
  const errors = validationErrors(ConfigSchema, withDefaults)
  if (errors.length > 0) {
    // A value outside an enumeration yields one `const` error per allowed value: fold them
    // into "must be one of ...". Each unknown key is reported at its own path ("schema is
    // false"); the parent's additionalProperties line would only repeat it.
    const allowed = new Map<string, unknown[]>()
    for (const error of errors) {
      if (error.keyword !== 'const') continue
      const list = allowed.get(error.instancePath) ?? []
      list.push((error.params as { allowedValue?: unknown }).allowedValue)
      allowed.set(error.instancePath, list)
    }
    const problems = [
      ...errors
        .filter((e) => !['additionalProperties', 'const'].includes(e.keyword))
        .filter((e) => !(e.keyword === 'anyOf' && allowed.has(e.instancePath)))
        .map((e) => describeError(e, sourceOf)),
      ...[...allowed].map(
        ([path, values]) =>
          `${path}: must be one of ${values.map((v) => JSON.stringify(v)).join(', ')}${sourceOf(path).text}`,
      ),
    ]
    const fromOverrides = errors.every((e) => sourceOf(e.instancePath).fromOverrides)
    throw new ConfigError([...new Set(problems)], fromOverrides)
  }
  const config = withDefaults as Config
  const extra = crossFieldProblems(config)
  const policyFile = config.gateway?.policyFile
  if (policyFile && !existsSync(policyFile)) {
    // Checked here so that the operator reads the setting and the fix, not `file:0:0`.
    extra.push(
      `/gateway/policyFile: the policy file ${policyFile} does not exist (a YAML or JSON route policy; fix the path)${sourceOf('/gateway/policyFile').text}`,
    )
  }
  if (extra.length > 0) throw new ConfigError(extra)
  return deepFreeze(config)
}

function readConfigFile(file: string): Json {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (error) {
    throw new ConfigError([`config file ${file}: ${(error as Error).message}`])
  }
  try {
    const parsed: unknown = ['.yaml', '.yml'].includes(extname(file))
      ? parseYaml(text)
      : JSON.parse(text)
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new Error('the top level must be an object')
    }
    return parsed as Json
  } catch (error) {
    throw new ConfigError([`config file ${file}: ${(error as Error).message}`])
  }
}

type Env = Readonly<Record<string, string | undefined>>

/** Longest secret file read: a URL or key, never more; a wrong path (a device) fails fast. */
const SECRET_FILE_MAX_BYTES = 64 * 1024

/**
 * The environment with each `<NAME>_FILE` of SECRET_ENV_VARIABLES read into `<NAME>` (one
 * trailing newline trimmed, as `echo` and editors leave one), and the names so read.
 * Problems name the variable and path, never the content.
 */
function withSecretFiles(env: Env): { env: Env; fromFiles: ReadonlySet<string> } {
  const out: Record<string, string | undefined> = { ...env }
  const fromFiles = new Set<string>()
  const problems: string[] = []
  for (const name of SECRET_ENV_VARIABLES) {
    const path = env[`${name}_FILE`]
    if (path === undefined || path === '') continue
    if (env[name] !== undefined && env[name] !== '') {
      problems.push(`${name}_FILE: ${name} is set too; give the value one way (unset one of them)`)
      continue
    }
    const value = readSecretFile(path)
    if ('problem' in value) {
      problems.push(`${name}_FILE: ${value.problem}`)
      continue
    }
    out[name] = value.text
    fromFiles.add(name)
  }
  if (problems.length > 0) throw new ConfigError(problems)
  return { env: out, fromFiles }
}

function readSecretFile(path: string): { text: string } | { problem: string } {
  let bytes: Buffer
  try {
    const fd = openSync(path, 'r')
    try {
      const buffer = Buffer.alloc(SECRET_FILE_MAX_BYTES + 1)
      let length = 0
      for (let n = -1; n !== 0 && length < buffer.length; length += n) {
        n = readSync(fd, buffer, length, buffer.length - length, null)
      }
      if (length > SECRET_FILE_MAX_BYTES) {
        return { problem: `${path} is larger than ${SECRET_FILE_MAX_BYTES} bytes` }
      }
      bytes = buffer.subarray(0, length)
    } finally {
      closeSync(fd)
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'error'
    return { problem: `cannot read ${path} (${code}); mount the secret file there or fix the path` }
  }
  const text = bytes.toString('utf8').replace(/\r?\n$/, '')
  if (text === '') return { problem: `${path} is empty` }
  return { text }
}

function fromEnv(env: Env): Json {
  const out: Json = {}
  for (const [name, path] of Object.entries(ENV_VARIABLES)) {
    const value = env[name]
    if (value === undefined || value === '' || path.startsWith('(')) continue
    setPath(out, path, value)
  }
  return out
}

function crossFieldProblems(config: Config): string[] {
  const problems: string[] = []
  const { tlsCertFile, tlsKeyFile, plainHttp } = config.server
  if (Boolean(tlsCertFile) !== Boolean(tlsKeyFile)) {
    problems.push('/server: tlsCertFile and tlsKeyFile must be given together')
  }
  if (!plainHttp && !config.dev && !tlsCertFile) {
    problems.push(
      '/server: HTTPS needs tlsCertFile and tlsKeyFile (or --dev for a self-signed certificate, or --http behind a TLS proxy)',
    )
  }
  if (plainHttp && config.server.clientCertificates) {
    problems.push(
      '/server/clientCertificates: needs HTTPS (plain HTTP has no client certificates; behind a proxy, use the decision API with the proxy forwarding the certificate)',
    )
  }
  if (Boolean(config.events.webhookUrl) !== Boolean(config.events.webhookSecret)) {
    // Unsigned delivery is not offered: a receiver could not tell our events from forgeries.
    problems.push('/events: webhookUrl and webhookSecret must be given together')
  }
  if (config.gateway?.policyStore && config.gateway.policyFile) {
    problems.push(
      '/gateway: policyStore and policyFile are exclusive; the policy comes from one place',
    )
  }
  if (config.pagination.defaultLimit > config.pagination.maxLimit) {
    problems.push('/pagination/defaultLimit: must not exceed maxLimit')
  }
  for (const [i, name] of config.gateway?.forwardHeaders.entries() ?? []) {
    // Identity headers are tokengate's word to the upstream; a caller's never passes.
    if (name.startsWith(IDENTITY_PREFIX)) {
      problems.push(
        `/gateway/forwardHeaders/${i}: ${name} is an identity header; it is never forwarded`,
      )
    }
  }
  if (config.decision) {
    problems.push(
      ...trustedProxyProblems(config.decision),
      ...decisionSocketProblems(config.decision, config.server.workers),
    )
  }
  if (
    config.pat.maxExpiresInDays > 0 &&
    config.pat.defaultExpiresInDays > config.pat.maxExpiresInDays
  ) {
    problems.push('/pat/defaultExpiresInDays: must not exceed maxExpiresInDays')
  }
  return problems
}

/**
 * What is wrong with `decision.trustedProxies`, each problem with its config path: an entry
 * that is not an address or CIDR block, a proxy kind that does not exist, an entry without a
 * kind while `decision.proxy` is not set. Checked when the configuration is loaded.
 */
function trustedProxyProblems(decision: {
  readonly trustedProxies: readonly string[]
  readonly proxy?: ProxyKind | undefined
}): string[] {
  const problems: string[] = []
  decision.trustedProxies.forEach((text, i) => {
    const path = `/decision/trustedProxies/${i}`
    const [where = '', named] = text.split('=').map((part) => part.trim())
    const problem = addressBlockProblem(where)
    if (problem) problems.push(`${path}: ${problem}`)
    if (named !== undefined && !(PROXY_KINDS as readonly string[]).includes(named)) {
      problems.push(`${path}: "${named}" is not one of ${PROXY_KINDS.join(', ')}`)
    } else if (named === undefined && decision.proxy === undefined) {
      problems.push(
        `${path}: say which proxy asks from ${where}: set decision.proxy (${PROXY_KINDS.join(' | ')}), or write ${where}=<proxy>`,
      )
    }
  })
  return problems
}

/** sun_path holds 108 bytes on Linux, its terminating NUL included (104 on macOS). */
const MAX_SOCKET_PATH_BYTES = 103

/**
 * What is wrong with `decision.socket` (decision/unix-socket.ts): a relative or too long path,
 * no `decision.proxy` (every peer on the socket is believed as that proxy), more than one
 * worker (each would claim the socket file for itself).
 */
function decisionSocketProblems(
  decision: {
    readonly socket?: { readonly path: string } | undefined
    readonly proxy?: ProxyKind | undefined
  },
  workers: number | 'auto',
): string[] {
  const { socket } = decision
  if (!socket) return []
  const problems: string[] = []
  const bytes = Buffer.byteLength(socket.path)
  if (!isAbsolute(socket.path)) {
    problems.push(`/decision/socket/path: "${socket.path}" must be an absolute path`)
  } else if (bytes > MAX_SOCKET_PATH_BYTES) {
    problems.push(
      `/decision/socket/path: ${bytes} bytes is longer than a Unix socket path may be (${MAX_SOCKET_PATH_BYTES})`,
    )
  }
  if (decision.proxy === undefined) {
    problems.push(
      '/decision/socket: set decision.proxy: every peer on the socket is believed as that proxy',
    )
  }
  if (workers !== 1) {
    problems.push(
      '/decision/socket: needs server.workers: 1 (each worker would claim the socket file); with more workers use decision.port',
    )
  }
  return problems
}

function describeError(
  error: {
    instancePath: string
    message: string
    keyword: string
    params: Readonly<Record<string, unknown>>
  },
  sourceOf: SourceFinder,
): string {
  const path = error.instancePath || '/'
  const { text } = sourceOf(error.instancePath)
  if (error.keyword === 'required') {
    // Named by the missing setting and how to set it, not `/gateway: must have required ...`.
    const missing = (error.params.requiredProperties as readonly string[] | undefined) ?? []
    return missing
      .map((name) => {
        const pointer = `${error.instancePath}/${name}`
        return `${pointer}: required (set it with ${howToSet(pointer, ENV_VARIABLES)})`
      })
      .join('; ')
  }
  if (error.message === 'schema is false') {
    return `${path}: unknown setting${didYouMeanSetting(error.instancePath)}${text}`
  }
  const words = error.keyword === 'pattern' ? patternInWords(error.params.pattern) : undefined
  return `${path}: ${words ?? error.message}${text}`
}

type SourceFinder = (pointer: string) => {
  readonly text: string
  readonly fromOverrides: boolean
}

/**
 * Where the value at a JSON pointer came from, as an operator would fix it: the overrides,
 * the environment variable (named, its value never echoed: it may be a secret), or the
 * config file. The highest-precedence source that set it wins, as in the merge. A value read
 * from `<NAME>_FILE` is named by that variable.
 */
function createSourceFinder(
  file: string | undefined,
  env: Env,
  fromFiles: ReadonlySet<string>,
  overrides: Json | undefined,
): SourceFinder {
  const has = (root: unknown, keys: readonly string[]) => {
    let node = root
    for (const key of keys) {
      if (node === null || typeof node !== 'object' || !Object.hasOwn(node, key)) return false
      node = (node as Json)[key]
    }
    return true
  }
  return (pointer) => {
    const keys = pointer.split('/').filter(Boolean)
    const dotted = keys.join('.')
    // Overrides are the caller's own values (the CLI's flags, a library's options): the
    // caller names them (the CLI adds the flag).
    if (keys.length > 0 && has(overrides, keys)) return { text: '', fromOverrides: true }
    const variable = Object.entries(ENV_VARIABLES).find(
      ([name, path]) => path === dotted && env[name] !== undefined && env[name] !== '',
    )?.[0]
    if (variable && fromFiles.has(variable)) {
      return {
        text: ` (from the file named by ${variable}_FILE; fix the file or unset it)`,
        fromOverrides: false,
      }
    }
    if (variable) {
      return {
        text: ` (from the environment variable ${variable}; fix or unset it)`,
        fromOverrides: false,
      }
    }
    if (file && keys.length > 0)
      return { text: ` (in the config file ${file})`, fromOverrides: false }
    return { text: '', fromOverrides: false }
  }
}

export function setPath(target: Json, path: string, value: unknown): void {
  const keys = path.split('.')
  let node = target
  for (const key of keys.slice(0, -1)) {
    const next = node[key]
    if (next === null || typeof next !== 'object') node[key] = {}
    node = node[key] as Json
  }
  node[keys[keys.length - 1] as string] = value
}

function deepMerge(base: Json, over: Json): Json {
  const out: Json = { ...base }
  for (const [key, value] of Object.entries(over)) {
    const prior = out[key]
    out[key] =
      isPlainObject(prior) && isPlainObject(value) ? deepMerge(prior, value) : (value as unknown)
  }
  return out
}

function isPlainObject(value: unknown): value is Json {
  return value !== null && typeof value === 'object' && !Array.isArray(value)
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const child of Object.values(value)) deepFreeze(child)
    Object.freeze(value)
  }
  return value
}

/**
 * YAML, loaded on the first YAML config file: a server configured by environment or JSON
 * never pays the parser's start-up time.
 */
function parseYaml(text: string): unknown {
  const yaml = createRequire(import.meta.url)('yaml') as typeof import('yaml')
  return yaml.parse(text)
}
