/**
 * Issue #30: the OCI image as platform teams run it (`npm run test:image`, after `npm run
 * image`). Real podman containers on the host network: read-only root filesystem, uid 65532,
 * the server as PID 1, a data volume; SIGTERM under load, SIGKILL after refusals, and two
 * containers on one Postgres + Redis. Counts are read from the store after the fact: for the
 * SIGTERM case before anything starts on the data again, so that a later start's recovery
 * cannot stand in for the drain.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { after, before, describe, it } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import {
  freePort,
  type PostgresServer,
  type RedisServer,
  startPostgres,
  startRedis,
} from '../helpers/services.ts'
import {
  type Container,
  createMounts,
  get,
  IMAGE,
  IMAGE_UID,
  imageSkipReason,
  type Mounts,
  podman,
  podmanOk,
  type Reply,
  removeAll,
  runContainer,
} from './podman.ts'

const skip = imageSkipReason()
if (skip) console.log(`# container suite skipped: ${skip}`)
const suiteStarted = performance.now()

/** Rate limits off: the load and the refusal bursts come from one address. */
const CONFIG = JSON.stringify({ rateLimit: { enabled: false } })

function sqlCount(dataDir: string, sql: string): number {
  const db = new DatabaseSync(join(dataDir, 'tokengate.db'), { readOnly: true })
  try {
    return Number((db.prepare(sql).get() as { n: number | null }).n ?? 0)
  } finally {
    db.close()
  }
}

const auditFailed = "SELECT count(*) AS n FROM audit_events WHERE type = 'auth.failed'"

/** A tenant and a PAT issued by the CLI inside the running container. */
async function issuePat(
  container: Container,
  tenant: string,
): Promise<{ token: string; id: string }> {
  const created = await container.cli('tenant', 'create', tenant)
  assert.equal(created.code, 0, created.stderr)
  const issued = await container.cli(
    'pat',
    'issue',
    '--tenant',
    tenant,
    '--subject',
    'ci',
    '--json',
  )
  assert.equal(issued.code, 0, issued.stderr)
  const { token, id } = JSON.parse(issued.stdout) as { token: string; id: string }
  return { token, id }
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

describe('the tokengate image under podman', { skip }, () => {
  after(async () => {
    await removeAll()
    console.log(`# container suite: ${((performance.now() - suiteStarted) / 1000).toFixed(1)} s`)
  })

  describe('one container on SQLite', () => {
    let mounts: Mounts
    let container: Container

    before(async () => {
      mounts = createMounts()
      const configFile = mounts.secret('config.json', CONFIG)
      container = await runContainer(mounts, {
        port: await freePort(),
        adminPort: await freePort(),
        env: { TOKENGATE_CONFIG: configFile },
      })
      const since = performance.now()
      await podmanOk(['start', container.name])
      const ms = await container.ready(since)
      console.log(`# podman start to first 200 on /readyz: ${ms.toFixed(0)} ms`)
    })

    after(async () => {
      await removeAll()
      mounts?.remove()
    })

    it('serves /healthz over HTTPS with the mounted certificate', async () => {
      const reply = await get(mounts.ca, container.url, '/healthz')
      assert.equal(reply.status, 200, reply.body)
    })

    it('runs the server as PID 1 of the container, as uid 65532, with node as the process', async () => {
      const pid = await container.hostPid()
      const status = readFileSync(`/proc/${pid}/status`, 'utf8')
      const field = (name: string) => status.match(new RegExp(`^${name}:\\s+(.*)$`, 'm'))?.[1]
      assert.equal(field('NSpid')?.split(/\s+/).at(-1), '1', 'PID 1 in its namespace')
      assert.deepEqual(field('Uid')?.split(/\s+/), Array(4).fill(String(IMAGE_UID)))
      assert.deepEqual(field('Gid')?.split(/\s+/), Array(4).fill(String(IMAGE_UID)))
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      assert.equal(argv[0], 'node')
      assert.ok(argv.includes('serve'), argv.join(' '))
    })

    it('has a read-only root filesystem; the data volume is the one place it writes', async () => {
      const onRoot = await podman([
        'exec',
        container.name,
        'node',
        '-e',
        "require('node:fs').writeFileSync('/opt/tokengate/probe', 'x')",
      ])
      assert.notEqual(onRoot.code, 0)
      assert.match(onRoot.stderr, /EROFS/)
      const onData = await podman([
        'exec',
        container.name,
        'node',
        '-e',
        "require('node:fs').writeFileSync('/var/lib/tokengate/probe', 'x')",
      ])
      assert.equal(onData.code, 0, onData.stderr)
      const inspected = await podmanOk([
        'inspect',
        '--format',
        '{{.HostConfig.ReadonlyRootfs}}',
        container.name,
      ])
      assert.equal(inspected.trim(), 'true')
    })

    it('its HEALTHCHECK passes, and the image carries its labels, user and default command', async () => {
      const health = await podman(['healthcheck', 'run', container.name])
      assert.equal(health.code, 0, health.stdout + health.stderr)
      const [image] = JSON.parse(await podmanOk(['image', 'inspect', IMAGE])) as [
        {
          Config: { User: string; Cmd: string[]; Labels: Record<string, string> }
          Healthcheck?: { Test: string[] }
          Size: number
        },
      ]
      const version = JSON.parse(
        readFileSync(new URL('../../package.json', import.meta.url), 'utf8'),
      ).version
      assert.equal(image.Config.User, `${IMAGE_UID}:${IMAGE_UID}`)
      assert.deepEqual(image.Config.Cmd, ['serve'])
      assert.equal(image.Config.Labels['org.opencontainers.image.version'], version)
      assert.equal(image.Config.Labels['org.opencontainers.image.licenses'], 'Apache-2.0')
      assert.ok(image.Config.Labels['org.opencontainers.image.source'])
      assert.ok(image.Healthcheck?.Test.includes('node'), JSON.stringify(image.Healthcheck))
      console.log(`# image ${IMAGE}: ${(image.Size / 1e6).toFixed(1)} MB`)
    })

    it('ships the package whole: docs, the forward-auth and framework examples, the manifests', async () => {
      const root = '/opt/tokengate/node_modules/tokengate'
      const files = [
        'README.md',
        'docs/container.md',
        'examples/forward-auth/nginx.conf',
        'examples/express/server.ts',
        'deploy/kubernetes/base/kustomization.yaml',
      ].map((file) => `${root}/${file}`)
      const listed = await podman([
        'exec',
        container.name,
        'node',
        '-e',
        `for (const file of ${JSON.stringify(files)}) require('node:fs').accessSync(file)`,
      ])
      assert.equal(listed.code, 0, listed.stderr)
    })

    it('logs JSON lines on stdout', async () => {
      const logs = await podmanOk(['logs', container.name])
      const lines = logs.split('\n').filter(Boolean)
      assert.ok(lines.length > 0)
      for (const line of lines) assert.equal(typeof JSON.parse(line).level, 'number', line)
    })

    it('podman stop under load: every accepted request answered, exit 0, usage and audit complete', async (t) => {
      const pat = await issuePat(container, 'acme')
      const tally = { ok: 0, unauthorized: 0, refused: 0, failed: [] as string[] }
      const count = (reply: Reply) => {
        if (reply.status === 200) tally.ok++
        else if (reply.status === 401) tally.unauthorized++
        else tally.failed.push(`${reply.status} ${reply.body.slice(0, 200)}`)
      }
      let stopping = false
      // Eight clients, each a fresh connection per request, alternating a valid PAT and a
      // refused token, until the server no longer takes connections.
      const client = async (n: number) => {
        for (let i = 0; ; i++) {
          const token = i % 2 === 0 ? pat.token : `tg_pat_refused_${n}_${i}`
          try {
            count(await get(mounts.ca, container.url, '/api/v1/me', bearer(token)))
          } catch (error) {
            if ((error as { accepted?: boolean }).accepted) {
              tally.failed.push(`accepted, then ${(error as Error).message}`)
            } else if (stopping) {
              tally.refused++
              return
            } else {
              throw error
            }
          }
        }
      }
      const clients = Array.from({ length: 8 }, (_, n) => client(n))
      await sleep(1500)
      const before = tally.ok + tally.unauthorized
      stopping = true
      const stop = await podman(['stop', '--time', '30', container.name])
      await Promise.all(clients)
      t.diagnostic(
        `${before} answered before podman stop, ${tally.ok + tally.unauthorized} in all (${tally.ok} 200, ${tally.unauthorized} 401), ${tally.refused} refused after, ${tally.failed.length} failed`,
      )
      assert.equal(stop.code, 0, stop.stderr)
      assert.ok(before > 0, 'the load ran before the stop')
      assert.equal(await container.exitCode(), 0)

      // Read before anything starts on the data again: the drain itself stored these.
      const { dataDir } = mounts
      const allowed = sqlCount(
        dataDir,
        "SELECT sum(allowed) AS n FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
      )
      const unauthorized = sqlCount(
        dataDir,
        "SELECT sum(unauthorized) AS n FROM usage_counts WHERE scope = 'all' AND resolution = 'minute'",
      )
      assert.equal(allowed, tally.ok, 'usage: allowed')
      assert.equal(unauthorized, tally.unauthorized, 'usage: unauthorized')
      assert.equal(sqlCount(dataDir, auditFailed), tally.unauthorized, 'audit: auth.failed')
      const spool = readdirSync(dataDir, { recursive: true }).filter((f) =>
        String(f).endsWith('.jsonl'),
      )
      t.diagnostic(`spool files left after the drain: ${spool.join(', ') || 'none'}`)
      assert.deepEqual(tally.failed, [], 'requests the server took and did not answer with 200/401')
    })
  })

  it('SIGKILL of PID 1 after N refusals, podman start again: all N audit events stored', async (t) => {
    const mounts = createMounts()
    t.after(() => mounts.remove())
    const container = await runContainer(mounts, {
      port: await freePort(),
      adminPort: await freePort(),
      env: { TOKENGATE_CONFIG: mounts.secret('config.json', CONFIG) },
    })
    await podmanOk(['start', container.name])
    await container.ready(performance.now())
    const pid = await container.hostPid()
    const refusals = 25
    const statuses = await Promise.all(
      Array.from({ length: refusals }, (_, i) =>
        get(mounts.ca, container.url, '/api/v1/me', bearer(`tg_pat_nope_${i}`)).then(
          (r) => r.status,
        ),
      ),
    )
    assert.deepEqual(new Set(statuses), new Set([401]))
    // The signal `podman kill -s KILL` sends, from here at once: podman's own start-up (~0.2 s)
    // would give the audit writer time to store the burst, and then nothing would be recovered.
    process.kill(pid, 'SIGKILL')
    await podman(['wait', container.name])
    const storedAtKill = sqlCount(mounts.dataDir, auditFailed)
    assert.equal(await container.exitCode(), 137)

    // The same container again: a new PID namespace, the server PID 1 as before.
    await podmanOk(['start', container.name])
    await container.ready(performance.now())
    let stored = sqlCount(mounts.dataDir, auditFailed)
    for (let i = 0; i < 150 && stored < refusals; i++) {
      await sleep(100)
      stored = sqlCount(mounts.dataDir, auditFailed)
    }
    t.diagnostic(
      `${storedAtKill} of ${refusals} auth.failed stored at the kill, ${stored} after the restart`,
    )
    assert.equal(stored, refusals)
    await podmanOk(['stop', '--time', '30', container.name])
  })

  describe('two containers on one Postgres and Redis', () => {
    let postgres: PostgresServer
    let redis: RedisServer
    let databaseUrl: string
    const mounts: Mounts[] = []
    let a: Container
    let b: Container

    before(async () => {
      postgres = await startPostgres()
      redis = await startRedis()
      databaseUrl = await postgres.createDatabase()
      for (let i = 0; i < 2; i++) {
        const m = createMounts()
        mounts.push(m)
      }
      const start = async (m: Mounts) => {
        // The URLs come as mounted secret files (<NAME>_FILE); a 5-minute lookup cache, so
        // that a revoke reaches the other container through the change feed, not expiry.
        const container = await runContainer(m, {
          port: await freePort(),
          adminPort: await freePort(),
          env: {
            DATABASE_URL_FILE: m.secret('database-url', `${databaseUrl}\n`),
            REDIS_URL_FILE: m.secret('redis-url', `${redis.url}\n`),
            TOKENGATE_CONFIG: m.secret(
              'config.json',
              JSON.stringify({
                rateLimit: { enabled: false },
                auth: { lookupCacheTtlMs: 300_000 },
              }),
            ),
          },
        })
        await podmanOk(['start', container.name])
        await container.ready(performance.now())
        return container
      }
      // One after the other: the first start migrates the database.
      a = await start(mounts[0] as Mounts)
      b = await start(mounts[1] as Mounts)
    })

    after(async () => {
      await removeAll()
      for (const m of mounts) m.remove()
      await redis?.stop()
      await postgres?.stop()
    })

    it('a PAT revoked through the CLI in one is refused by both within 1 s', async (t) => {
      const pat = await issuePat(a, 'acme')
      const status = async (c: Container) =>
        (await get(c.ca, c.url, '/api/v1/me', bearer(pat.token))).status
      assert.equal(await status(a), 200)
      assert.equal(await status(b), 200)

      // Measured from the revoke's commit (polled in Postgres), not from the CLI's start.
      const client = new pg.Client({ connectionString: databaseUrl })
      await client.connect()
      t.after(() => client.end())
      const revoke = a.cli('pat', 'revoke', pat.id)
      let committed = 0
      for (let i = 0; i < 6000 && !committed; i++) {
        const row = await client.query('SELECT revoked_at FROM pats WHERE id = $1', [pat.id])
        if (row.rows[0]?.revoked_at != null) committed = performance.now()
        else await sleep(5)
      }
      assert.ok(committed, 'the revoke committed')
      const until401 = async (c: Container) => {
        while ((await status(c)) !== 401) {
          if (performance.now() - committed > 5000) throw new Error(`${c.name} still accepts it`)
          await sleep(20)
        }
        return performance.now() - committed
      }
      const [onA, onB] = await Promise.all([until401(a), until401(b)])
      const out = await revoke
      assert.equal(out.code, 0, out.stderr)
      t.diagnostic(
        `revoke committed → 401 on A after ${onA.toFixed(0)} ms, on B after ${onB.toFixed(0)} ms`,
      )
      assert.ok(onA < 1000, `A: ${onA} ms`)
      assert.ok(onB < 1000, `B: ${onB} ms`)
    })
  })
})
