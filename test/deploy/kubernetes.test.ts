/**
 * deploy/kubernetes renders and holds what it promises, without a cluster: every overlay
 * rendered by `kubectl kustomize`, every object validated against the Kubernetes (and CRD)
 * schemas, then what a schema cannot say: the locked-down pod, the probes, the grace period
 * against the drain configured in the same overlay, the PDB, pinned images, resources, the
 * config file loaded by tokengate's own loader with the Deployment's environment (so every
 * setting and variable name is a real one), ports and Services that agree with that config,
 * and the forward-auth objects pointing at the decision listener they configure. What the
 * manifests promise about the container itself (uid, read-only root, probes answering,
 * SIGTERM) is proven by the podman tests (test/container/), not here.
 */
import assert from 'node:assert/strict'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { before, describe, test } from 'node:test'
import { parse } from 'yaml'
import { ENV_VARIABLES, loadConfig } from '../../src/config/load.ts'
import type { Config } from '../../src/config/schema.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  containerOf,
  deploymentOf,
  find,
  imageProblems,
  type K8sObject,
  KUBERNETES_DIR,
  kubectlPath,
  lockdownProblems,
  probeProblems,
  quantity,
  render,
  resourceProblems,
  schemaProblems,
} from './manifests.ts'

const ROOT = join(import.meta.dirname, '..', '..')
const VERSION: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).version
const IMAGE = `localhost/tokengate:${VERSION}`
/** The uid the Containerfile runs as (`USER 65532:65532`). */
const IMAGE_UID = Number(
  /^USER (\d+)/m.exec(readFileSync(join(ROOT, 'Containerfile'), 'utf8'))?.[1] ?? Number.NaN,
)
/**
 * docs/scale-out.md "Memory per instance": the highest RSS (VmHWM) measured under load with
 * 1,000,000 keys stored and 100,000 cached, on SQLite and on Postgres + Redis (2026-11-28).
 */
const MEASURED_PEAK_RSS_BYTES = 190.2e6
/** After the drain, what serve gives the flushes before it exits anyway (serve.ts). */
const FLUSH_SEC = 5
/** So that the kubelet's SIGKILL at the end of the grace period never races that exit. */
const MARGIN_SEC = 5
const OVERLAYS = ['envoy-gateway', 'ingress-nginx', 'postgres-redis', 'sqlite', 'traefik']
const FORWARD_AUTH = ['ingress-nginx', 'traefik', 'envoy-gateway']

const kubectl = kubectlPath()
const skip = (() => {
  if (kubectl) return false
  if (process.env.CI === 'true') throw new Error('CI=true but kubectl is not installed')
  return 'kubectl unavailable: not on PATH (apt-get install kubectl)'
})()
const scratch = tempDir('tg-k8s-')

test('the overlays are the five documented ones', () => {
  const found = readdirSync(join(KUBERNETES_DIR, 'overlays')).sort()
  assert.deepEqual(found, OVERLAYS)
  const docs = readFileSync(join(ROOT, 'docs', 'kubernetes.md'), 'utf8')
  for (const overlay of OVERLAYS) assert.match(docs, new RegExp(`overlays/${overlay}\\b`))
})

/** tokengate's configuration as the pod would load it: the ConfigMap's file and the env. */
function loadPodConfig(objects: readonly K8sObject[], overlay: string): Readonly<Config> {
  const deployment = deploymentOf(objects)
  const container = containerOf(deployment)
  const root = join(scratch, overlay)
  const mounts: { mountPath: string }[] = container.volumeMounts
  const inPod = (path: string) => join(root, path)
  const env: Record<string, string> = {}
  for (const { name, value } of container.env as { name: string; value: string }[]) {
    const mounted = mounts.some((m) => value.startsWith(`${m.mountPath}/`))
    env[name] = mounted ? inPod(value) : value
  }
  const configMap = find(objects, 'ConfigMap').find((c) =>
    deployment.spec.template.spec.volumes.some(
      (v: { configMap?: { name: string } }) => v.configMap?.name === c.metadata.name,
    ),
  )
  assert.ok(configMap, 'the config volume names a rendered ConfigMap')
  const configPath = env.TOKENGATE_CONFIG as string
  mkdirSync(dirname(configPath), { recursive: true })
  writeFileSync(configPath, configMap.data['tokengate.yaml'])
  for (const [name, path] of Object.entries(env)) {
    if (!name.endsWith('_FILE') || name === 'TOKENGATE_SECRET_KEY_FILE') continue
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, `${SECRET_VALUES[name.slice(0, -'_FILE'.length)] ?? 'x'}\n`)
  }
  return loadConfig({ env })
}

/** What the mounted Secret files hold in loadPodConfig (a Secret made from `echo ... >`). */
const SECRET_VALUES: Record<string, string> = {
  DATABASE_URL: 'postgres://tokengate:pw@postgres.db:5432/tokengate',
  REDIS_URL: 'redis://redis.db:6379',
}

const portsOf = (deployment: K8sObject): { name: string; containerPort: number }[] =>
  containerOf(deployment).ports

function servicePort(objects: readonly K8sObject[], url: string): number {
  const match = /^http:\/\/([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local:(\d+)\/$/.exec(url)
  assert.ok(match, `${url} names a Service by its cluster DNS name`)
  const [, name, namespace, port] = match
  const service = find(objects, 'Service', name).find((s) => s.metadata.namespace === namespace)
  assert.ok(service, `${url}: Service ${namespace}/${name} is rendered`)
  const entry = service.spec.ports.find((p: { port: number }) => p.port === Number(port))
  assert.ok(entry, `${url}: Service ${name} has port ${port}`)
  return containerPortOf(objects, entry.targetPort)
}

function containerPortOf(objects: readonly K8sObject[], targetPort: string | number): number {
  if (typeof targetPort === 'number') return targetPort
  const port = portsOf(deploymentOf(objects)).find((p) => p.name === targetPort)
  assert.ok(port, `targetPort ${targetPort} is a named container port`)
  return port.containerPort
}

for (const overlay of OVERLAYS) {
  describe(`deploy/kubernetes/overlays/${overlay}`, { skip }, () => {
    let objects: K8sObject[]
    let deployment: K8sObject
    let config: Readonly<Config>
    before(() => {
      objects = render(kubectl as string, join(KUBERNETES_DIR, 'overlays', overlay))
      deployment = deploymentOf(objects)
      config = loadPodConfig(objects, overlay)
    })

    test('every rendered object is valid against its Kubernetes or CRD schema', async () => {
      assert.ok(objects.length > 5)
      const problems = (await Promise.all(objects.map(schemaProblems))).flat()
      assert.deepEqual(problems, [])
    })

    test('the pod runs as the image uid, read-only, unprivileged, no capabilities, seccomp', () => {
      assert.ok(Number.isInteger(IMAGE_UID), 'the Containerfile names a numeric USER')
      assert.deepEqual(lockdownProblems(deployment, IMAGE_UID), [])
      const ns = find(objects, 'Namespace', deployment.metadata.namespace)[0]
      assert.equal(ns?.metadata.labels['pod-security.kubernetes.io/enforce'], 'restricted')
    })

    test('liveness /healthz, readiness /readyz, over HTTPS on the API port', () => {
      assert.deepEqual(probeProblems(deployment), [])
    })

    test(`the image is ${IMAGE}, never latest`, () => {
      assert.deepEqual(imageProblems(deployment, IMAGE), [])
    })

    test('resources: requests and limits, the memory request a margin above the measured peak', () => {
      assert.deepEqual(resourceProblems(deployment), [])
      const { requests, limits } = containerOf(deployment).resources
      // 25 %: what the bench leaves out (TLS, the admin and metrics listeners, other traffic).
      assert.ok(quantity(requests.memory) >= 1.25 * MEASURED_PEAK_RSS_BYTES, requests.memory)
      assert.ok(quantity(limits.memory) >= 2 * MEASURED_PEAK_RSS_BYTES, limits.memory)
    })

    test('terminationGracePeriodSeconds = preStop + the drain + the flush + a margin', () => {
      const pod = deployment.spec.template.spec
      const preStop = containerOf(deployment).lifecycle?.preStop?.sleep?.seconds ?? 0
      assert.ok(preStop > 0, 'a preStop sleep lets endpoints go before SIGTERM')
      assert.equal(
        pod.terminationGracePeriodSeconds,
        preStop + config.server.shutdownTimeoutMs / 1000 + FLUSH_SEC + MARGIN_SEC,
      )
      // Below Kubernetes' default, as issue 30 asks of the drain.
      assert.ok(pod.terminationGracePeriodSeconds <= 30)
    })

    test('a PodDisruptionBudget selects the pods and never blocks a drain forever', () => {
      const [pdb] = find(objects, 'PodDisruptionBudget')
      assert.ok(pdb)
      const labels = deployment.spec.template.metadata.labels
      for (const [key, value] of Object.entries(pdb.spec.selector.matchLabels)) {
        assert.equal(labels[key], value, `the PDB's ${key} matches the pods`)
      }
      assert.equal(pdb.spec.minAvailable, undefined)
      assert.ok(pdb.spec.maxUnavailable >= 1)
    })

    test("the config file and the environment load with tokengate's own loader", () => {
      const known = new Set(Object.keys(ENV_VARIABLES))
      for (const { name } of containerOf(deployment).env as { name: string }[]) {
        if (known.has(name)) continue
        // NAME_FILE: the setting of NAME, read from the file (the container convention).
        const base = name.replace(/_FILE$/, '')
        assert.ok(name !== base && known.has(base), `${name} is a tokengate variable`)
        const setting = (ENV_VARIABLES[base] as string)
          .split('.')
          .reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], config)
        assert.equal(setting, SECRET_VALUES[base], `${name} sets ${ENV_VARIABLES[base]}`)
      }
      assert.equal(config.server.plainHttp, false)
      assert.equal(config.server.workers, 1)
    })

    test('the listeners bind the pod address and match the container ports', () => {
      const wanted = new Map<string, number>([['https', config.server.port]])
      if (config.admin.enabled) wanted.set('admin', config.admin.port)
      if (config.metrics.enabled) wanted.set('metrics', config.metrics.port)
      if (config.decision) wanted.set('decision', config.decision.port)
      if (config.decision?.grpcPort !== undefined) wanted.set('ext-authz', config.decision.grpcPort)
      const ports = portsOf(deployment)
      assert.deepEqual(
        Object.fromEntries(ports.map((p) => [p.name, p.containerPort])),
        Object.fromEntries(wanted),
      )
      for (const host of [
        config.server.host,
        config.admin.enabled ? config.admin.host : '0.0.0.0',
        config.metrics.enabled ? config.metrics.host : '0.0.0.0',
        config.decision?.host ?? '0.0.0.0',
      ]) {
        assert.equal(host, '0.0.0.0')
      }
      for (const service of find(objects, 'Service')) {
        for (const [key, value] of Object.entries(service.spec.selector)) {
          assert.equal(deployment.spec.template.metadata.labels[key], value)
        }
        for (const port of service.spec.ports) containerPortOf(objects, port.targetPort)
      }
    })

    test('files: data inside a writable volume, secrets from Secret volumes, nothing unmounted', () => {
      const pod = deployment.spec.template.spec
      const mounts: { name: string; mountPath: string; readOnly?: boolean }[] =
        containerOf(deployment).volumeMounts
      const volumeOf = (path: string) => {
        const mount = mounts.find((m) => path.startsWith(`${m.mountPath}/`))
        assert.ok(mount, `${path} is inside a mounted volume`)
        const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name)
        assert.ok(volume, `volume ${mount.name} exists`)
        return { mount, volume }
      }
      for (const m of mounts) volumeOf(`${m.mountPath}/x`)
      const env = Object.fromEntries(
        (containerOf(deployment).env as { name: string; value: string }[]).map((e) => [
          e.name,
          e.value,
        ]),
      )
      // A subdirectory: tokengate makes its data directory 0700, which it cannot do to a
      // volume root that belongs to root (fsGroup).
      const data = volumeOf(env.TOKENGATE_DATA_DIR as string)
      assert.notEqual(data.mount.readOnly, true)
      assert.notEqual(env.TOKENGATE_DATA_DIR, data.mount.mountPath)
      assert.ok(volumeOf('/tmp/x').volume.emptyDir, '/tmp is an emptyDir (NODE_COMPILE_CACHE)')
      for (const name of Object.keys(env).filter((n) => n.endsWith('_FILE'))) {
        assert.ok(volumeOf(env[name] as string).volume.secret, `${name} is read from a Secret`)
      }
      assert.ok(volumeOf(env.TOKENGATE_CONFIG as string).volume.configMap)
    })

    test('every Secret it needs is named, with its command, in docs/kubernetes.md', () => {
      const docs = readFileSync(join(ROOT, 'docs', 'kubernetes.md'), 'utf8')
      const secrets = deployment.spec.template.spec.volumes
        .filter((v: { secret?: unknown }) => v.secret)
        .map((v: { secret: { secretName: string } }) => v.secret.secretName)
      assert.ok(secrets.length >= 2)
      for (const secret of secrets) {
        assert.match(docs, new RegExp(`kubectl create secret \\w+ ${secret}\\b`), secret)
      }
    })

    if (overlay === 'sqlite') {
      test('sqlite: one pod, Recreate, the data directory on a PersistentVolumeClaim', () => {
        assert.equal(deployment.spec.replicas, 1)
        assert.equal(deployment.spec.strategy.type, 'Recreate')
        assert.equal(config.databaseUrl, undefined)
        const data = deployment.spec.template.spec.volumes.find(
          (v: { name: string }) => v.name === 'data',
        )
        assert.deepEqual(Object.keys(data).sort(), ['name', 'persistentVolumeClaim'])
        const [claim] = find(objects, 'PersistentVolumeClaim', data.persistentVolumeClaim.claimName)
        assert.deepEqual(claim?.spec.accessModes, ['ReadWriteOnce'])
        assert.equal(find(objects, 'HorizontalPodAutoscaler').length, 0)
      })
    } else {
      test('Postgres + Redis: URLs from Secret files, 3+ pods by the HPA, rolling with no gap', () => {
        assert.equal(config.databaseUrl, SECRET_VALUES.DATABASE_URL)
        assert.equal(config.redisUrl, SECRET_VALUES.REDIS_URL)
        assert.equal(deployment.spec.replicas, undefined, 'the HPA owns the replica count')
        const [hpa] = find(objects, 'HorizontalPodAutoscaler')
        assert.ok(hpa)
        assert.equal(hpa.spec.scaleTargetRef.name, deployment.metadata.name)
        const [pdb] = find(objects, 'PodDisruptionBudget')
        assert.ok(hpa.spec.minReplicas - (pdb?.spec.maxUnavailable ?? 0) >= 2)
        assert.equal(deployment.spec.strategy.rollingUpdate.maxUnavailable, 0)
      })
    }

    if (FORWARD_AUTH.includes(overlay)) {
      test('forward auth: only the proxy namespace reaches the decision ports', () => {
        const [policy] = find(objects, 'NetworkPolicy')
        assert.ok(policy)
        const decisionPorts = ['decision', 'ext-authz']
        for (const rule of policy.spec.ingress) {
          const names = rule.ports.map((p: { port: string }) => p.port)
          const opens = names.some((n: string) => decisionPorts.includes(n))
          if (opens) assert.ok(rule.from?.[0]?.namespaceSelector, 'decision: a namespace only')
        }
      })
    }

    if (overlay === 'ingress-nginx') {
      test('ingress-nginx: auth-url is the decision listener; the example annotations', () => {
        assert.equal(config.decision?.proxy, 'ingress-nginx')
        const [ingress] = find(objects, 'Ingress')
        const annotations = ingress?.metadata.annotations
        const authUrl = annotations['nginx.ingress.kubernetes.io/auth-url']
        assert.equal(servicePort(objects, authUrl), config.decision?.port)
        const example = parse(
          readFileSync(join(ROOT, 'examples', 'forward-auth', 'ingress-nginx.yaml'), 'utf8'),
        )
        const { 'nginx.ingress.kubernetes.io/auth-url': _, ...rest } = annotations
        const { 'nginx.ingress.kubernetes.io/auth-url': __, ...wanted } =
          example.metadata.annotations
        assert.deepEqual(rest, wanted)
      })
    }

    if (overlay === 'traefik') {
      test("traefik: forwardAuth asks the decision listener as the example's does", () => {
        assert.equal(config.decision?.proxy, 'traefik')
        const middlewares = find(objects, 'Middleware')
        const forward = middlewares.find((m) => m.spec.forwardAuth)?.spec.forwardAuth
        assert.equal(servicePort(objects, forward.address), config.decision?.port)
        const { http } = parse(
          readFileSync(join(ROOT, 'examples', 'forward-auth', 'traefik-dynamic.yml'), 'utf8'),
        )
        const { address: _, ...options } = forward
        const { address: __, ...wanted } = http.middlewares.tokengate.forwardAuth
        assert.deepEqual(options, wanted)
        // The route runs the example's chain, each middleware rendered in its namespace.
        const [route] = find(objects, 'IngressRoute')
        const chain = route?.spec.routes[0].middlewares.map((m: { name: string }) => m.name)
        assert.deepEqual(chain, http.routers.api.middlewares)
        for (const name of chain) {
          const m = find(objects, 'Middleware', name)[0]
          assert.equal(m?.metadata.namespace, route?.metadata.namespace)
          if (name !== 'tokengate') assert.deepEqual(m?.spec, http.middlewares[name])
        }
      })
    }

    if (overlay === 'envoy-gateway') {
      test('envoy-gateway: SecurityPolicy extAuth over gRPC to the ext_authz port, granted', () => {
        const decision = config.decision
        assert.equal(decision?.proxy, 'envoy')
        const [policy] = find(objects, 'SecurityPolicy')
        assert.equal(policy?.spec.extAuth.failOpen, false)
        const [ref] = policy?.spec.extAuth.grpc.backendRefs ?? []
        const service = find(objects, 'Service', ref.name).find(
          (s) => s.metadata.namespace === ref.namespace,
        )
        const port = service?.spec.ports.find((p: { port: number }) => p.port === ref.port)
        assert.equal(containerPortOf(objects, port.targetPort), decision?.grpcPort)
        assert.equal(port.appProtocol, 'kubernetes.io/h2c')
        const [grant] = find(objects, 'ReferenceGrant')
        assert.equal(grant?.metadata.namespace, ref.namespace)
        assert.deepEqual(grant?.spec.from, [
          {
            group: 'gateway.envoyproxy.io',
            kind: 'SecurityPolicy',
            namespace: policy?.metadata.namespace,
          },
        ])
        const [target] = policy?.spec.targetRefs ?? []
        const route = find(objects, target.kind, target.name)[0]
        assert.equal(route?.metadata.namespace, policy?.metadata.namespace)
      })
    }
  })
}

describe('the checks fail on a broken manifest', { skip }, () => {
  let deployment: K8sObject
  let objects: K8sObject[]
  before(() => {
    objects = render(kubectl as string, join(KUBERNETES_DIR, 'overlays', 'traefik'))
    deployment = deploymentOf(objects)
  })
  const broken = (change: (d: K8sObject) => void) => {
    const copy = structuredClone(deployment)
    change(copy)
    return copy
  }

  test('a port given as a string, a missing container name, an unknown kind: schema errors', async () => {
    const badPort = broken((d) => {
      containerOf(d).ports[0].containerPort = '8443'
    })
    assert.match((await schemaProblems(badPort)).join(), /containerPort must be integer/)
    const noName = broken((d) => {
      d.spec.template.spec.containers[0] = { ...containerOf(d), name: undefined }
    })
    assert.match((await schemaProblems(noName)).join(), /required property 'name'|name/)
    assert.match(
      (await schemaProblems({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: {} })).join(),
      /no schema known/,
    )
  })

  test('a CRD field of the wrong shape fails its CRD schema', async () => {
    const middleware = structuredClone(find(objects, 'Middleware', 'tokengate')[0] as K8sObject)
    middleware.spec.forwardAuth.authRequestHeaders = 'Authorization'
    assert.match((await schemaProblems(middleware)).join(), /authRequestHeaders must be array/)
    const policy = find(objects, 'Middleware', 'cors')[0] as K8sObject
    assert.deepEqual(await schemaProblems(policy), [])
  })

  test('each promise check names what broke', () => {
    const writable = broken((d) => {
      delete containerOf(d).securityContext.readOnlyRootFilesystem
      containerOf(d).securityContext.capabilities.add = ['NET_ADMIN']
      d.spec.template.spec.enableServiceLinks = true
    })
    assert.deepEqual(lockdownProblems(writable, 65532), [
      'enableServiceLinks is true, not false',
      'container tokengate readOnlyRootFilesystem is undefined, not true',
      'container tokengate capabilities.add is ["NET_ADMIN"], not undefined',
    ])
    assert.match(lockdownProblems(deployment, 0).join(), /runAsUser is 65532, not 0/)
    const http = broken((d) => {
      containerOf(d).readinessProbe.httpGet.scheme = 'HTTP'
      containerOf(d).livenessProbe.httpGet.path = '/'
    })
    assert.deepEqual(probeProblems(http), [
      'livenessProbe: path /, not /healthz',
      'readinessProbe: scheme HTTP, not HTTPS',
    ])
    const latest = broken((d) => {
      containerOf(d).image = 'localhost/tokengate:latest'
    })
    assert.match(imageProblems(latest, IMAGE).join(), /has no version tag/)
    const untagged = broken((d) => {
      containerOf(d).image = 'localhost:5000/tokengate'
    })
    assert.match(imageProblems(untagged, IMAGE).join(), /has no version tag/)
    const unlimited = broken((d) => {
      delete containerOf(d).resources.limits
    })
    assert.deepEqual(resourceProblems(unlimited), ['no cpu limit', 'no memory limit'])
  })
})
