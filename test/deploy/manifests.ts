/**
 * deploy/kubernetes as kubectl renders it, and what the tests check of it: every object
 * against its schema (kubernetes-models: the Kubernetes OpenAPI schemas, and the Traefik,
 * Envoy Gateway and Gateway API CRD schemas, compiled into validators), then the promises a
 * schema cannot state. Each check returns its problems, so a unit case can show a broken
 * manifest failing it.
 */
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { delimiter, join } from 'node:path'
import { parseAllDocuments } from 'yaml'

export const KUBERNETES_DIR = join(import.meta.dirname, '..', '..', 'deploy', 'kubernetes')

/** A value of rendered YAML, read field by field (the schemas have checked its shape). */
// biome-ignore lint/suspicious/noExplicitAny: see above
export type Yaml = any
export type K8sObject = {
  apiVersion: string
  kind: string
  metadata: Yaml
  spec?: Yaml
  [k: string]: Yaml
}

/** The absolute path of kubectl (Debian's package installs /usr/bin/kubectl), if any. */
export function kubectlPath(): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'kubectl'))) return join(dir, 'kubectl')
  }
  return existsSync('/usr/bin/kubectl') ? '/usr/bin/kubectl' : undefined
}

/** `kubectl kustomize <dir>`, parsed: one object per YAML document. */
export function render(kubectl: string, dir: string): K8sObject[] {
  const text = execFileSync(kubectl, ['kustomize', dir], { encoding: 'utf8' })
  return parseAllDocuments(text).map((doc) => {
    if (doc.errors.length > 0) throw new Error(`${dir}: ${doc.errors[0]?.message}`)
    return doc.toJS() as K8sObject
  })
}

/**
 * The model module of an apiVersion and kind: kubernetes-models for Kubernetes' own groups,
 * @kubernetes-models/<crd> for the CRDs the overlays use. Undefined: no schema is known, which
 * the validation reports (an object nobody can check is not shipped).
 */
function modelModule(apiVersion: string, kind: string): string | undefined {
  const [group = '', version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion]
  if (!/^[A-Za-z]+$/.test(kind) || !version) return undefined
  if (group === '') return `kubernetes-models/${version}/${kind}`
  if (group === 'traefik.io') return `@kubernetes-models/traefik/${apiVersion}/${kind}`
  if (group === 'gateway.envoyproxy.io') {
    return `@kubernetes-models/envoy-gateway/${apiVersion}/${kind}`
  }
  if (group === 'gateway.networking.k8s.io') {
    return `@kubernetes-models/gateway-api/${apiVersion}/${kind}`
  }
  if (!group.includes('.') || group.endsWith('.k8s.io')) {
    return `kubernetes-models/${apiVersion}/${kind}`
  }
  return undefined
}

/**
 * Validates one object against its schema; resolves with the problems (empty: valid). The
 * schemas are Kubernetes' own, so types, formats, enums and required fields are checked;
 * unknown fields are not (the OpenAPI schemas allow them: the API server drops or, under
 * strict field validation, refuses them), which is why the checks below name every field
 * that matters.
 */
export async function schemaProblems(object: K8sObject): Promise<string[]> {
  const name = `${object.kind}/${object.metadata?.name}`
  const specifier = modelModule(String(object.apiVersion), String(object.kind))
  if (!specifier) return [`${name}: no schema known for ${object.apiVersion} ${object.kind}`]
  let Model: new (data: unknown) => { validate(): void }
  try {
    Model = (await import(specifier))[object.kind]
  } catch {
    return [`${name}: no schema known for ${object.apiVersion} ${object.kind}`]
  }
  try {
    new Model(object).validate()
    return []
  } catch (error) {
    return [`${name}: ${(error as Error).message}`]
  }
}

export function find(objects: readonly K8sObject[], kind: string, name?: string): K8sObject[] {
  return objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name))
}

/** The one tokengate Deployment of a render. */
export function deploymentOf(objects: readonly K8sObject[]): K8sObject {
  const [deployment, ...more] = find(objects, 'Deployment', 'tokengate')
  if (!deployment || more.length > 0) throw new Error('expected one Deployment "tokengate"')
  return deployment
}

export function containerOf(deployment: K8sObject): Yaml {
  return deployment.spec.template.spec.containers.find(
    (c: { name: string }) => c.name === 'tokengate',
  )
}

/** The pod and container security settings issue 30 promises (and Pod Security "restricted"). */
export function lockdownProblems(deployment: K8sObject, uid: number): string[] {
  const pod = deployment.spec?.template?.spec ?? {}
  const problems: string[] = []
  const expect = (what: string, actual: unknown, wanted: unknown) => {
    if (JSON.stringify(actual) !== JSON.stringify(wanted)) {
      problems.push(`${what} is ${JSON.stringify(actual)}, not ${JSON.stringify(wanted)}`)
    }
  }
  expect('pod runAsNonRoot', pod.securityContext?.runAsNonRoot, true)
  expect('pod runAsUser', pod.securityContext?.runAsUser, uid)
  expect('pod seccompProfile', pod.securityContext?.seccompProfile?.type, 'RuntimeDefault')
  expect('automountServiceAccountToken', pod.automountServiceAccountToken, false)
  // A Service named tokengate(-admin) would set TOKENGATE_PORT / TOKENGATE_ADMIN_PORT.
  expect('enableServiceLinks', pod.enableServiceLinks, false)
  for (const container of [...(pod.containers ?? []), ...(pod.initContainers ?? [])]) {
    const sc = container.securityContext ?? {}
    const c = `container ${container.name}`
    expect(`${c} runAsNonRoot`, sc.runAsNonRoot, true)
    expect(`${c} runAsUser`, sc.runAsUser, uid)
    expect(`${c} readOnlyRootFilesystem`, sc.readOnlyRootFilesystem, true)
    expect(`${c} allowPrivilegeEscalation`, sc.allowPrivilegeEscalation, false)
    expect(`${c} capabilities.drop`, sc.capabilities?.drop, ['ALL'])
    expect(`${c} capabilities.add`, sc.capabilities?.add, undefined)
    expect(`${c} privileged`, sc.privileged, undefined)
    expect(`${c} seccompProfile`, sc.seccompProfile?.type, 'RuntimeDefault')
  }
  return problems
}

/** Liveness on /healthz, readiness on /readyz, both HTTPS on the API port. */
export function probeProblems(deployment: K8sObject): string[] {
  const container = containerOf(deployment) ?? {}
  const problems: string[] = []
  const wanted = {
    startupProbe: '/healthz',
    livenessProbe: '/healthz',
    readinessProbe: '/readyz',
  } as const
  for (const [probe, path] of Object.entries(wanted)) {
    const get = container[probe]?.httpGet
    if (!get) {
      problems.push(`${probe}: no httpGet`)
      continue
    }
    if (get.path !== path) problems.push(`${probe}: path ${get.path}, not ${path}`)
    if (get.scheme !== 'HTTPS') problems.push(`${probe}: scheme ${get.scheme}, not HTTPS`)
    if (get.port !== 'https') problems.push(`${probe}: port ${get.port}, not the https port`)
  }
  return problems
}

/** Every image pinned to a version tag (never `latest`, never untagged). */
export function imageProblems(deployment: K8sObject, expected: string): string[] {
  const pod = deployment.spec.template.spec
  return [...pod.containers, ...(pod.initContainers ?? [])].flatMap(
    (c: { name: string; image: string }) => {
      const tag = /:([^/:@]+)$/.exec(c.image)?.[1]
      if (!tag || tag === 'latest')
        return [`container ${c.name}: image ${c.image} has no version tag`]
      return c.image === expected ? [] : [`container ${c.name}: image ${c.image}, not ${expected}`]
    },
  )
}

const UNITS: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  k: 1e3,
  M: 1e6,
  G: 1e9,
}

/** A Kubernetes quantity in bytes or cores (`320Mi`, `250m`, `1`). */
export function quantity(text: string | number): number {
  const match = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|k|M|G)?$/.exec(String(text))
  if (!match) throw new Error(`not a quantity: ${text}`)
  const value = Number(match[1])
  if (match[2] === 'm') return value / 1000
  return value * (match[2] ? (UNITS[match[2]] as number) : 1)
}

/** Requests and limits for CPU and memory, requests within limits. */
export function resourceProblems(deployment: K8sObject): string[] {
  const resources = containerOf(deployment)?.resources ?? {}
  const problems: string[] = []
  for (const kind of ['cpu', 'memory']) {
    const request = resources.requests?.[kind]
    const limit = resources.limits?.[kind]
    if (request === undefined) problems.push(`no ${kind} request`)
    if (limit === undefined) problems.push(`no ${kind} limit`)
    if (request !== undefined && limit !== undefined && quantity(request) > quantity(limit)) {
      problems.push(`${kind} request ${request} above its limit ${limit}`)
    }
  }
  return problems
}
