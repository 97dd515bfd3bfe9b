/**
 * The sqlite overlay's pod, started by podman the way a kubelet starts it: the rendered
 * Deployment's image, args, environment, user and group, read-only root, dropped
 * capabilities and no-new-privileges; its volumes as a kubelet mounts them (the ConfigMap and
 * the Secrets as read-only files of mode defaultMode owned by root and the fsGroup, the data
 * volume's root owned by root with the fsGroup's group bits, /tmp a tmpfs). Then the probes of
 * the spec answer (over HTTPS), and SIGTERM ends the pod with exit 0 within
 * terminationGracePeriodSeconds. Only the listener ports are changed (free ports: podman
 * shares the host network here). Needs podman and the image `npm run image` builds.
 */
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import {
  chmodSync,
  chownSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { request } from 'node:https'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { writeSelfSignedCertificate } from '../container/podman.ts'
import { freePort } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import {
  containerOf,
  deploymentOf,
  find,
  type K8sObject,
  KUBERNETES_DIR,
  kubectlPath,
  quantity,
  render,
  type Yaml,
} from './manifests.ts'

const kubectl = kubectlPath()
const objects = kubectl ? render(kubectl, join(KUBERNETES_DIR, 'overlays', 'sqlite')) : []
/** The overlay's image; TOKENGATE_IMAGE names another repository, as for `npm run image`. */
const image: string | undefined = objects.length
  ? String(containerOf(deploymentOf(objects)).image).replace(
      /^.*(?=:[^:/]+$)/,
      (repository) => process.env.TOKENGATE_IMAGE ?? repository,
    )
  : undefined

function unavailable(): string | undefined {
  if (!kubectl) return 'no kubectl on PATH'
  if (spawnSync('podman', ['--version']).status !== 0) return 'no podman (apt-get install podman)'
  if (spawnSync('podman', ['image', 'exists', image as string]).status !== 0) {
    return `no image ${image} (npm run image)`
  }
  return undefined
}
const skip = (() => {
  // The volumes are made as a kubelet makes them (owned by root and the fsGroup): that takes
  // root, as rootful podman does; not a missing binary, so CI skips too when not root.
  if (process.getuid?.() !== 0) return 'pod shape: needs root (volumes owned by root:fsGroup)'
  const reason = unavailable()
  if (reason === undefined) return false
  if (process.env.CI === 'true') throw new Error(`CI=true but the pod cannot run: ${reason}`)
  return `pod shape unavailable: ${reason}`
})()

const name = `tokengate-k8s-pod-${process.pid}`
const podman = (...args: string[]) =>
  execFileSync('podman', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
process.on('exit', () => {
  spawnSync('podman', ['rm', '--force', '--time', '0', name])
  spawnSync('podman', ['rm', '--force', '--time', '0', `${name}-root`])
})

/** What a kubelet mounts for one volume, as a podman option. */
function mountOf(volume: Yaml, mount: Yaml, pod: Yaml, root: string, objects: K8sObject[]) {
  const fsGroup: number = pod.securityContext.fsGroup
  const dir = join(root, volume.name)
  if (volume.emptyDir?.medium === 'Memory') {
    return ['--tmpfs', `${mount.mountPath}:rw,size=${quantity(volume.emptyDir.sizeLimit)}`]
  }
  mkdirSync(dir, { recursive: true })
  const files: Record<string, string> = {}
  let mode = 0o644
  if (volume.configMap) {
    Object.assign(files, find(objects, 'ConfigMap', volume.configMap.name)[0]?.data)
  } else if (volume.secret) {
    mode = volume.secret.defaultMode ?? 0o644
    Object.assign(files, SECRETS[volume.secret.secretName as string])
  } else {
    // emptyDir on disk or a PersistentVolumeClaim: the root belongs to root; fsGroup adds the
    // group, its write bit and setgid (the kubelet's SetVolumeOwnership).
    chownSync(dir, 0, fsGroup)
    chmodSync(dir, 0o2775)
    return ['--volume', `${dir}:${mount.mountPath}`]
  }
  for (const [file, text] of Object.entries(files)) {
    writeFileSync(join(dir, file), text)
    chownSync(join(dir, file), 0, volume.secret ? fsGroup : 0)
    chmodSync(join(dir, file), mode)
  }
  return ['--volume', `${dir}:${mount.mountPath}:ro`]
}

/** The Secrets docs/kubernetes.md has the operator create, with throwaway values. */
const SECRETS: Record<string, Record<string, string>> = {}

function httpsStatus(port: number, path: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(
      { host: '127.0.0.1', port, path, rejectUnauthorized: false, timeout: 2000 },
      (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      },
    )
    req.on('error', () => resolve(0)).on('timeout', () => req.destroy())
    req.end()
  })
}

describe('the sqlite pod, run by podman as the kubelet would', { skip }, () => {
  let deployment: K8sObject
  let container: Yaml
  let root: string
  let args: string[]
  let apiPort: number

  before(async () => {
    deployment = deploymentOf(objects)
    container = containerOf(deployment)
    const pod = deployment.spec.template.spec
    root = tempDir('tg-k8s-pod-')
    const key = join(root, 'tls.key')
    const cert = join(root, 'tls.crt')
    writeSelfSignedCertificate(key, cert)
    SECRETS['tokengate-tls'] = {
      'tls.crt': readFileSync(cert, 'utf8'),
      'tls.key': readFileSync(key, 'utf8'),
    }
    SECRETS['tokengate-keys'] = {
      'secret.key': execFileSync('openssl', ['rand', '-base64', '32'], { encoding: 'utf8' }),
    }
    const ports: Record<string, number> = {}
    for (const variable of ['TOKENGATE_PORT', 'TOKENGATE_ADMIN_PORT', 'TOKENGATE_METRICS_PORT']) {
      ports[variable] = await freePort()
    }
    apiPort = ports.TOKENGATE_PORT as number
    const sc = container.securityContext
    args = [
      // A kubelet ignores the image's HEALTHCHECK: the probes below take its place.
      '--no-healthcheck',
      '--network',
      'host',
      '--user',
      `${sc.runAsUser}:${sc.runAsGroup}`,
      '--group-add',
      String(pod.securityContext.fsGroup),
      ...(sc.readOnlyRootFilesystem ? ['--read-only'] : []),
      ...sc.capabilities.drop.map((cap: string) => `--cap-drop=${cap}`),
      ...(sc.allowPrivilegeEscalation === false ? ['--security-opt', 'no-new-privileges'] : []),
      ...container.env.flatMap((e: { name: string; value: string }) => [
        '--env',
        `${e.name}=${ports[e.name] ?? e.value}`,
      ]),
      ...container.volumeMounts.flatMap((mount: Yaml) =>
        mountOf(
          pod.volumes.find((v: Yaml) => v.name === mount.name),
          mount,
          pod,
          root,
          objects,
        ),
      ),
    ]
  })

  after(() => {
    spawnSync('podman', ['rm', '--force', '--time', '0', name])
  })

  test('its probes answer over HTTPS, and SIGTERM ends it with 0 within the grace period', async () => {
    const started = performance.now()
    podman('run', '--detach', '--name', name, ...args, image as string, ...container.args)
    const budgetMs =
      container.startupProbe.periodSeconds * container.startupProbe.failureThreshold * 1000
    const ready = container.readinessProbe.httpGet
    let status = 0
    while (status !== 200 && performance.now() - started < budgetMs) {
      status = await httpsStatus(apiPort, ready.path)
      if (status !== 200) await sleep(200)
    }
    const readyMs = performance.now() - started
    assert.equal(status, 200, `${ready.path} within the startup probe's ${budgetMs / 1000} s`)
    assert.equal(await httpsStatus(apiPort, container.livenessProbe.httpGet.path), 200)
    const data = statSync(join(root, 'data', 'data'))
    assert.equal(data.uid, container.securityContext.runAsUser)
    assert.equal(data.mode & 0o777, 0o700)
    assert.ok(readdirSync(join(root, 'data', 'data')).includes('tokengate.db'))

    const grace: number = deployment.spec.template.spec.terminationGracePeriodSeconds
    const stopping = performance.now()
    podman('stop', '--time', String(grace), name)
    const stoppedMs = performance.now() - stopping
    const exitCode = podman('inspect', name, '--format', '{{.State.ExitCode}}').trim()
    process.stdout.write(
      `# podman run to ${ready.path} 200: ${readyMs.toFixed(0)} ms; SIGTERM to exit: ${stoppedMs.toFixed(0)} ms\n`,
    )
    assert.equal(exitCode, '0')
    assert.ok(stoppedMs < grace * 1000)
  })

  test('the image holds the package with its examples and these manifests', () => {
    // The bin the image starts, from its ENTRYPOINT: <package>/bin/tokengate.js.
    const entrypoint: string[] = JSON.parse(
      podman('image', 'inspect', image as string, '--format', '{{json .Config.Entrypoint}}'),
    )
    const bin = entrypoint.find((arg) => arg.endsWith('/bin/tokengate.js'))
    assert.ok(bin, `the ENTRYPOINT ${JSON.stringify(entrypoint)} starts the package's bin`)
    const shipped = [
      'examples/forward-auth/nginx.conf',
      'examples/forward-auth/ingress-nginx.yaml',
      'examples/express/server.ts',
      'deploy/kubernetes/overlays/sqlite/kustomization.yaml',
    ].map((path) => bin.replace(/bin\/tokengate\.js$/, path))
    const found = podman(
      'run',
      '--rm',
      '--no-healthcheck',
      '--network',
      'none',
      '--entrypoint',
      'node',
      image as string,
      '-e',
      `for (const p of ${JSON.stringify(shipped)}) console.log(require('node:fs').existsSync(p) ? 'ok' : 'missing', p)`,
    )
    assert.deepEqual(
      found.trim().split('\n'),
      shipped.map((p) => `ok ${p}`),
    )
  })

  test('why the data directory is a subdirectory: at the volume root the pod cannot start', () => {
    const atRoot = args.map((arg) =>
      arg.startsWith('TOKENGATE_DATA_DIR=') ? 'TOKENGATE_DATA_DIR=/var/lib/tokengate' : arg,
    )
    const run = spawnSync(
      'podman',
      ['run', '--name', `${name}-root`, ...atRoot, image as string, ...container.args],
      { encoding: 'utf8', timeout: 120_000 },
    )
    assert.equal(run.status, 1)
    assert.match(run.stderr, /EPERM: operation not permitted, chmod '\/var\/lib\/tokengate'/)
  })
})
