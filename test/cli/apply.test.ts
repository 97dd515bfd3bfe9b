import assert from 'node:assert/strict'
import { generateKeyPairSync } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

interface Plan {
  dryRun: boolean
  changes: { kind: string; id: string; action: string; note?: string }[]
}

describe('tokengate apply', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  // A dry run needs a store to compare with (it never creates one): start an empty one.
  before(async () => assert.equal((await cli(['migrate'], { dataDir })).code, 0))
  after(() => data.cleanup())
  const ecPem = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .publicKey.export({ type: 'spki', format: 'pem' })
    .toString()
  writeFileSync(join(dataDir, 'issuer.pem'), ecPem)
  const applyFile = join(dataDir, 'tokengate.apply.yaml')
  const policyFile = join(dataDir, 'policy.yaml')

  const desired = (acmeEnabled: boolean, audience: string) => `
tenants:
  - id: acme
    name: Acme Corp
    enabled: ${acmeEnabled}
  - id: beta
issuers:
  - issuer: https://login.example.com/
    audience: [${audience}]
    pem-file: issuer.pem
    algorithm: ES256
    tenant: acme
gateway:
  policyFile: policy.yaml
  policy:
    default: authenticated
    rules:
      - methods: [GET]
        path: /api/v1/reports/*
        permissions: [reports:read]
`

  it('--dry-run plans every create and changes nothing', async () => {
    writeFileSync(applyFile, desired(true, 'api'))
    const run = await cli(['apply', '-f', applyFile, '--dry-run', '--json'], { dataDir })
    assert.equal(run.code, 3, run.stderr)
    const plan = JSON.parse(run.stdout) as Plan
    assert.equal(plan.dryRun, true)
    assert.deepEqual(
      plan.changes.map((c) => `${c.action} ${c.kind} ${c.id}`),
      [
        'create tenant acme',
        'create tenant beta',
        'create issuer https://login.example.com/',
        `create policy ${policyFile}`,
      ],
    )
    const tenants = await withDataStore(dataDir, (store) => store.listTenants())
    assert.equal(tenants.length, 0)
  })

  it('applies through the tenant and issuer commands (audited), then is idempotent', async () => {
    const first = await cli(['apply', '-f', applyFile], { dataDir })
    assert.equal(first.code, 0, first.stderr)
    assert.match(first.stdout, /Applied 4 changes\./)
    await withDataStore(dataDir, async (store) => {
      const tenants = await store.listTenants()
      assert.deepEqual(
        tenants.map((t) => [t.id, t.name, t.enabled]),
        [
          ['acme', 'Acme Corp', true],
          ['beta', 'beta', true],
        ],
      )
      const [issuer] = await store.listIssuers()
      assert.equal(issuer?.issuer, 'https://login.example.com/')
      assert.deepEqual(issuer?.tenant, { fixed: 'acme' })
      const audit = await store.listAudit('acme', { limit: 10 })
      const types = audit.items.map((e) => e.type).sort()
      assert.deepEqual(types, ['issuer.added', 'tenant.created'])
    })
    assert.match(readFileSync(policyFile, 'utf8'), /reports:read/)

    const again = await cliJson<Plan>(['apply', '-f', applyFile], { dataDir })
    assert.ok(
      again.changes.every((c) => c.action === 'unchanged'),
      JSON.stringify(again.changes),
    )
  })

  it('a changed file plans and applies only the differences', async () => {
    writeFileSync(applyFile, desired(false, 'api2').replace('Acme Corp', 'Acme Renamed'))
    const plan = await cli(['apply', '-f', applyFile, '--dry-run'], { dataDir })
    assert.equal(plan.code, 3, plan.stderr)
    assert.match(plan.stdout, /^update {4}tenant acme \(rename\)$/m)
    assert.match(plan.stdout, /^update {4}tenant acme \(disable\)$/m)
    assert.match(plan.stdout, /^unchanged tenant beta$/m)
    assert.match(plan.stdout, /^update {4}issuer https:\/\/login.example.com\/ \(replace\)$/m)
    assert.match(plan.stdout, /Dry run: 3 changes planned, nothing applied\./)

    const applied = await cliJson<Plan>(['apply', '-f', applyFile], { dataDir })
    assert.equal(applied.changes.filter((c) => c.action === 'update').length, 3)
    await withDataStore(dataDir, async (store) => {
      const acme = await store.findTenant('acme')
      assert.equal(acme?.enabled, false)
      assert.equal(acme?.name, 'Acme Renamed')
      const audit = await store.listAudit('acme', { limit: 10 })
      const renamed = audit.items.find((e) => e.type === 'tenant.updated')
      assert.deepEqual(renamed?.details, {
        before: { name: 'Acme Corp' },
        after: { name: 'Acme Renamed' },
      })
      assert.deepEqual((await store.listIssuers())[0]?.audiences, ['api2'])
    })
  })

  it("a tenant's own rate limit: set, kept, back to the default; a name not stated is left alone", async () => {
    writeFileSync(applyFile, 'tenants:\n  - id: beta\n    rateLimit: 50000/1m\n')
    const set = await cliJson<Plan>(['apply', '-f', applyFile], { dataDir })
    assert.deepEqual(set.changes, [
      {
        kind: 'tenant',
        id: 'beta',
        action: 'update',
        note: 'rate limit 50000/60s',
        command: ['tenant', 'edit', 'beta', '--rate-limit', '50000/60s'],
      },
    ])
    const stored = () => withDataStore(dataDir, (store) => store.findTenant('beta'))
    assert.deepEqual((await stored())?.rateLimit, { max: 50000, windowSec: 60 })
    // The same rate in another spelling is no change.
    writeFileSync(applyFile, 'tenants:\n  - id: beta\n    rateLimit: 50000/60s\n')
    const again = await cli(['apply', '-f', applyFile, '--dry-run'], { dataDir })
    assert.equal(again.code, 0, again.stdout)
    // Not stated: left as it is.
    writeFileSync(applyFile, 'tenants:\n  - id: beta\n')
    assert.equal((await cli(['apply', '-f', applyFile, '--dry-run'], { dataDir })).code, 0)
    writeFileSync(applyFile, 'tenants:\n  - id: beta\n    rateLimit: default\n')
    const cleared = await cliJson<Plan>(['apply', '-f', applyFile], { dataDir })
    assert.equal(cleared.changes[0]?.note, 'default rate limit')
    assert.equal((await stored())?.rateLimit ?? null, null)
    assert.equal((await stored())?.name, 'beta')
  })

  it('a tenant missing from the file is left alone (no pruning)', async () => {
    writeFileSync(applyFile, 'tenants:\n  - id: beta\n')
    const plan = await cliJson<Plan>(['apply', '-f', applyFile], { dataDir })
    assert.deepEqual(plan.changes, [{ kind: 'tenant', id: 'beta', action: 'unchanged' }])
    assert.ok(await withDataStore(dataDir, (store) => store.findTenant('acme')))
  })

  it('bad files are refused with file:line:col and the commands’ own rules, changing nothing', async () => {
    const cases: [string, RegExp][] = [
      [
        'tenants:\n  - id: "has space"\n',
        /tokengate\.apply\.yaml:2:5: tenants\[0\]: id: .*not a valid tenant id/,
      ],
      [
        'tenants:\n  - id: x\n    colour: red\n',
        /tokengate\.apply\.yaml:2:5: tenants\[0\]: unknown key colour/,
      ],
      [
        'tenants:\n  - id: x\n    rateLimit: lots\n',
        /tokengate\.apply\.yaml:2:5: tenants\[0\]\.rateLimit: 'lots' is not a rate \(expected N\/WINDOW, e\.g\. 100\/1m or 10\/1s\) or default/,
      ],
      [
        'tenants:\n  - id: x\n    rateLimit: 0/1m\n',
        /tokengate\.apply\.yaml:2:5: tenants\[0\]\.rateLimit: '0\/1m' is not a rate/,
      ],
      [
        'issuers:\n  - issuer: https://x.example/\n    audience: api\n',
        /issuers\[0\]: .*key source/,
      ],
      ['issuers:\n  - issuer: https://x.example/\n    bogus: 1\n', /issuers\[0\]: .*bogus/],
      [
        'gateway:\n  policyFile: p.yaml\n  policy:\n    rules:\n      - methods: [get]\n        path: /api/v1/x\n',
        /tokengate\.apply\.yaml:5:19: rules\[0\]\.methods: not an upper-case HTTP method/,
      ],
      ['surprise: 1\n', /tokengate\.apply\.yaml:1:1: unknown key surprise/],
      ['tenants: [\n', /tokengate\.apply\.yaml:\d+:\d+: /],
    ]
    for (const [text, message] of cases) {
      writeFileSync(applyFile, text)
      const result = await cli(['apply', '-f', applyFile], { dataDir })
      assert.equal(result.code, 1, text)
      assert.match(result.stderr, message)
    }
    for (const name of ['evil\u001b[2J', 'x\u202etxt.exe', 'a\u200bb', 'n'.repeat(201)]) {
      writeFileSync(applyFile, `tenants:\n  - id: named\n    name: ${JSON.stringify(name)}\n`)
      const dryRun = await cli(['apply', '-f', applyFile, '--dry-run'], { dataDir })
      assert.equal(dryRun.code, 1, dryRun.stdout)
      assert.match(
        dryRun.stderr,
        /tokengate\.apply\.yaml:2:5: tenants\[0\]: --name: expected at most 200/,
      )
      assert.equal(dryRun.stdout, '')
    }
    assert.equal(await withDataStore(dataDir, (store) => store.findTenant('named')), undefined)
    const missing = await cli(['apply'], { dataDir })
    assert.equal(missing.code, 2)
    assert.match(missing.stderr, /missing -f FILE/)
  })
})

/**
 * Attacks on `apply` (issue #25), each written before its fix: a file that passes --dry-run
 * but stops half way, file references that escape the applied file's directory (read and
 * quoted in the error, or overwritten), and keys that redirect the writes to another store.
 */
describe('tokengate apply: hostile or broken files change nothing', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const root = join(data.dir, 'gitops')
  const outside = join(data.dir, 'outside')
  const dataDir = join(data.dir, 'store')
  before(async () => assert.equal((await cli(['migrate'], { dataDir })).code, 0))
  mkdirSync(root)
  mkdirSync(outside)
  const file = join(root, 'tokengate.apply.yaml')
  const canary = 'CANARY-7f3a9e-do-not-print'
  writeFileSync(join(outside, 'canary.txt'), `${canary}\n`)
  const pem = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .publicKey.export({ type: 'spki', format: 'pem' })
    .toString()
  writeFileSync(join(root, 'issuer.pem'), pem)

  it('an issuer naming an unknown tenant is refused by --dry-run and by apply, before any write', async () => {
    writeFileSync(
      file,
      'tenants:\n  - id: fresh\nissuers:\n  - issuer: https://idp.example/\n    audience: api\n    pem-file: issuer.pem\n    algorithm: ES256\n    tenant: ghost\n',
    )
    for (const args of [['--dry-run'], []]) {
      const result = await cli(['apply', '-f', file, ...args], { dataDir })
      assert.equal(result.code, 1, result.stdout)
      assert.match(result.stderr, /issuers\[0\].*tenant ghost/)
    }
    assert.equal(await withDataStore(dataDir, (store) => store.findTenant('fresh')), undefined)
  })

  it('a key file outside the applied file’s directory is refused, its contents never printed', async () => {
    writeFileSync(
      file,
      'issuers:\n  - issuer: https://idp.example/\n    audience: api\n    jwks-file: ../outside/canary.txt\n',
    )
    const result = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /outside/)
    assert.doesNotMatch(result.stderr + result.stdout, /CANARY/)
    // Inside the directory, a file that is not a key set: named, never quoted.
    writeFileSync(join(root, 'not-jwks.json'), `${canary}\n`)
    writeFileSync(
      file,
      'issuers:\n  - issuer: https://idp.example/\n    audience: api\n    jwks-file: not-jwks.json\n',
    )
    const bad = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(bad.code, 1)
    assert.match(bad.stderr, /not-jwks\.json/)
    assert.doesNotMatch(bad.stderr + bad.stdout, /CANARY/)
  })

  it('a policyFile outside the directory is refused and left untouched', async () => {
    const target = join(outside, 'policy.yaml')
    writeFileSync(target, 'default: deny\n')
    writeFileSync(
      file,
      'gateway:\n  policyFile: ../outside/policy.yaml\n  policy:\n    default: authenticated\n',
    )
    const result = await cli(['apply', '-f', file], { dataDir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /outside/)
    assert.equal(readFileSync(target, 'utf8'), 'default: deny\n')
  })

  it('a global option spelled as an issuer key (data-dir) is refused: writes cannot be redirected', async () => {
    const elsewhere = join(data.dir, 'elsewhere')
    writeFileSync(
      file,
      `issuers:\n  - issuer: https://idp.example/\n    audience: api\n    pem-file: issuer.pem\n    algorithm: ES256\n    data-dir: ${elsewhere}\n`,
    )
    const result = await cli(['apply', '-f', file], { dataDir })
    assert.equal(result.code, 1)
    assert.match(result.stderr, /issuers\[0\]: unknown key data-dir/)
    assert.equal(existsSync(elsewhere), false)
  })

  it('--dry-run exits 3 while changes are pending and 0 once there are none', async () => {
    writeFileSync(file, 'tenants:\n  - id: pending\n')
    const planned = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(planned.code, 3, planned.stderr)
    assert.match(planned.stdout, /create {4}tenant pending/)
    assert.equal((await cli(['apply', '-f', file], { dataDir })).code, 0)
    assert.equal((await cli(['apply', '-f', file, '--dry-run'], { dataDir })).code, 0)
  })
})

describe('tokengate export, then apply; apply --prune', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const dataDir = join(data.dir, 'store')
  const out = join(data.dir, 'export')

  it('export writes a file that apply accepts and that plans nothing on the same store; no secret', async () => {
    const work = join(data.dir, 'setup')
    mkdirSync(work)
    const pem = generateKeyPairSync('ec', { namedCurve: 'P-256' })
      .publicKey.export({ type: 'spki', format: 'pem' })
      .toString()
    writeFileSync(join(work, 'issuer.pem'), pem)
    writeFileSync(join(work, 'hmac.secret'), 'a-shared-secret-that-must-never-leave-0123456789')
    writeFileSync(
      join(work, 'policy.yaml'),
      '# reports\ndefault: deny\nrules:\n  - methods: [GET]\n    path: /api/v1/r/*\n    permissions: [r:read]\n',
    )
    for (const args of [
      ['tenant', 'create', 'acme', '--name', 'Acme Corp'],
      ['tenant', 'create', 'beta'],
      ['tenant', 'disable', 'beta'],
      ['tenant', 'edit', 'acme', '--rate-limit', '500/1m'],
      [
        'issuer',
        'add',
        '--issuer',
        'https://pem.example/',
        '--audience',
        'api',
        '--pem-file',
        join(work, 'issuer.pem'),
        '--algorithm',
        'ES256',
        '--tenant',
        'acme',
      ],
      [
        'issuer',
        'add',
        '--issuer',
        'https://url.example/',
        '--audience',
        'api',
        '--audience',
        'two',
        '--jwks-url',
        'https://url.example/jwks',
        '--permissions-claim',
        'scope',
      ],
      [
        'issuer',
        'add',
        '--issuer',
        'https://hmac.example/',
        '--audience',
        'api',
        '--secret-file',
        join(work, 'hmac.secret'),
        '--algorithm',
        'HS256',
        '--tenant-claim',
        'org',
      ],
      ['policy', 'set', join(work, 'policy.yaml')],
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'ci', '--permission', 'tokens:read'],
      [
        'pat',
        'issue',
        '--tenant',
        'acme',
        '--subject',
        'billing',
        '--rate-limit',
        '10/1s',
        '--quota',
        '1000',
        '--quota-refill',
        'monthly',
        '--metadata',
        '{"plan":"pro"}',
        '--external-id',
        'cus_1',
      ],
    ]) {
      const result = await cli(args, { dataDir })
      assert.equal(result.code, 0, `${args.join(' ')}: ${result.stderr}`)
    }
    const exported = await cli(['export', '--out', out], { dataDir })
    assert.equal(exported.code, 0, exported.stderr)
    assert.match(exported.stdout, /Shared secret not exported.*hmac\.example/)
    const text = readFileSync(join(out, 'tokengate.apply.yaml'), 'utf8')
    assert.match(text, /subject: ci/)
    assert.match(text, /rateLimit: 500\/60s/)
    assert.match(text, /rateLimit: 10\/1s/)
    assert.match(text, /quota:\n\s+limit: 1000\n\s+refill: monthly/)
    assert.match(text, /externalId: cus_1/)
    for (const name of readdirSync(join(out, 'keys'))) {
      assert.doesNotMatch(readFileSync(join(out, 'keys', name), 'utf8'), /shared-secret/)
    }
    assert.doesNotMatch(text, /shared-secret|pat_[A-Za-z0-9]{20}/)
    // The operator supplies the secret; then the export is a no-op on the same store.
    writeFileSync(
      join(out, 'keys', 'issuer-1.secret'),
      'a-shared-secret-that-must-never-leave-0123456789',
    )
    const plan = await cli(
      ['apply', '-f', join(out, 'tokengate.apply.yaml'), '--dry-run', '--json'],
      {
        dataDir,
      },
    )
    assert.equal(plan.code, 0, `${plan.stdout} ${plan.stderr}`)
    const changes = (JSON.parse(plan.stdout) as Plan).changes
    assert.ok(
      changes.every((c) => c.action === 'unchanged'),
      plan.stdout,
    )
    // Two tenants, three issuers, the policy and two keys.
    assert.equal(changes.length, 8)
  })

  it('--prune --dry-run shows what goes; --prune disables, removes, and keeps what is listed', async () => {
    assert.equal((await cli(['tenant', 'create', 'gamma'], { dataDir })).code, 0)
    const file = join(out, 'pruned.yaml')
    writeFileSync(
      file,
      'tenants:\n  - id: acme\n    name: Acme Corp\nissuers:\n  - issuer: https://url.example/\n    audience: [api, two]\n    jwks-url: https://url.example/jwks\n    permissions-claim: scope\n',
    )
    const plan = await cli(['apply', '-f', file, '--prune', '--dry-run'], { dataDir })
    assert.equal(plan.code, 3, plan.stderr)
    assert.match(
      plan.stdout,
      /^remove {4}issuer https:\/\/pem\.example\/ \(prune: not in the file\)$/m,
    )
    assert.match(plan.stdout, /^remove {4}issuer https:\/\/hmac\.example\/ /m)
    assert.match(plan.stdout, /^remove {4}policy store:gateway /m)
    assert.match(plan.stdout, /^update {4}tenant gamma \(disable \(prune: not in the file\)\)$/m)
    assert.doesNotMatch(plan.stdout, /tenant beta/, 'already disabled: nothing to do')
    const applied = await cli(['apply', '-f', file, '--prune'], { dataDir })
    assert.equal(applied.code, 0, applied.stderr)
    await withDataStore(dataDir, async (store) => {
      assert.deepEqual(
        (await store.listIssuers()).map((i) => i.issuer),
        ['https://url.example/'],
      )
      assert.equal(await store.getPolicy('gateway'), undefined)
      assert.equal((await store.findTenant('acme'))?.enabled, true)
      assert.equal((await store.findTenant('gamma'))?.enabled, false, 'disabled, not deleted')
    })
    const again = await cli(['apply', '-f', file, '--prune', '--dry-run'], { dataDir })
    assert.equal(again.code, 0, again.stdout)
  })
})

describe("tokengate apply: existing keys' settings", () => {
  const data = tempDataDir()
  const dataDir = data.dir
  after(() => data.cleanup())
  const file = join(dataDir, 'keys.yaml')

  const issue = async (subject: string) => {
    const issued = await cliJson<{ id: string }>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', subject, '--permission', 'tokens:read'],
      { dataDir },
    )
    return issued.id
  }

  it('edits what the file states, through pat edit and pat disable (audited); again: unchanged', async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], { dataDir })).code, 0)
    const id = await issue('ci')
    writeFileSync(
      file,
      `keys:
  - id: ${id}
    tenant: acme
    subject: ci
    name: deploys
    permissions: [tokens:read, audit:read]
    rateLimit: 100/1m
    quota: { limit: 5000, refill: 12h }
    metadata: { plan: pro }
    externalId: cus_42
    enabled: false
`,
    )
    const plan = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(plan.code, 3, plan.stderr)
    assert.match(
      plan.stdout,
      new RegExp(
        `^update {4}key ${id} \\(rename, permissions, rate limit 100/60s, quota 5000 43200s, metadata, external id\\)$`,
        'm',
      ),
    )
    assert.match(plan.stdout, new RegExp(`^update {4}key ${id} \\(disable\\)$`, 'm'))
    const applied = await cli(['apply', '-f', file], { dataDir })
    assert.equal(applied.code, 0, applied.stderr)
    await withDataStore(dataDir, async (store) => {
      const key = await store.getPat(id)
      assert.equal(key?.name, 'deploys')
      assert.deepEqual([...(key?.permissions ?? [])].sort(), ['audit:read', 'tokens:read'])
      assert.deepEqual(key?.rateLimit, { max: 100, windowSec: 60 })
      assert.equal(key?.quota?.limit, 5000)
      assert.equal(key?.quota?.refill, 'interval')
      assert.equal(key?.quota?.intervalSec, 43_200)
      assert.deepEqual(key?.metadata, { plan: 'pro' })
      assert.equal(key?.externalId, 'cus_42')
      assert.notEqual(key?.disabledAt ?? null, null)
      const audit = await store.listAudit('acme', { limit: 20 })
      assert.ok(audit.items.some((e) => e.type === 'pat.updated'))
      assert.ok(audit.items.some((e) => e.type === 'pat.disabled'))
    })
    const again = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(again.code, 0, again.stdout)
    assert.match(again.stdout, new RegExp(`^unchanged key ${id}$`, 'm'))

    // Cleared back, enabled again; fields not stated are left alone.
    writeFileSync(
      file,
      `keys:\n  - id: ${id}\n    rateLimit: default\n    quota: none\n    metadata: null\n    externalId: null\n    enabled: true\n`,
    )
    assert.equal((await cli(['apply', '-f', file], { dataDir })).code, 0)
    await withDataStore(dataDir, async (store) => {
      const key = await store.getPat(id)
      assert.equal(key?.rateLimit ?? null, null)
      assert.equal(key?.quota ?? null, null)
      assert.equal(key?.metadata ?? null, null)
      assert.equal(key?.externalId ?? null, null)
      assert.equal(key?.disabledAt ?? null, null)
      assert.equal(key?.name, 'deploys')
    })
  })

  it('refuses before any write: an unknown key, a key described differently, a revoked key, a bad value', async () => {
    const id = await issue('other')
    const revoked = await issue('gone')
    assert.equal((await cli(['pat', 'revoke', revoked], { dataDir })).code, 0)
    const cases: [string, RegExp][] = [
      [
        'keys:\n  - id: tok_doesnotexist000000\n    name: x\n',
        /keys\.yaml:2:5: keys\[0\]: no key tok_doesnotexist000000 \(apply never creates keys: issue one with pat issue\)/,
      ],
      [
        `keys:\n  - id: ${id}\n    tenant: beta\n    name: x\n`,
        /keys\[0\]: tenant is "beta" in the file but "acme" for tok_.*; apply does not change it/,
      ],
      [
        `keys:\n  - id: ${id}\n    expiresAt: "2099-01-01T00:00:00.000Z"\n`,
        /keys\[0\]: expiresAt is .* apply does not change it \(use pat edit --expires-at\)/,
      ],
      [`keys:\n  - id: ${revoked}\n    name: x\n`, /is revoked; a revoked key cannot be changed/],
      [`keys:\n  - id: ${id}\n    rateLimit: lots\n`, /keys\[0\]: rateLimit: 'lots' is not a rate/],
      [`keys:\n  - id: ${id}\n    colour: red\n`, /keys\[0\]: unknown key colour/],
      [
        // The second entry is refused: the first, valid, is not applied either.
        `keys:\n  - id: ${id}\n    name: renamed\n  - id: ${id}\n    quota: { limit: lots }\n`,
        /keys\[1\]: quota\.limit: 'lots' is not a number of uses/,
      ],
    ]
    for (const [text, expected] of cases) {
      writeFileSync(file, text)
      const result = await cli(['apply', '-f', file], { dataDir })
      assert.equal(result.code, 1, `${text}: ${result.stdout}`)
      assert.match(result.stderr, expected)
    }
    await withDataStore(dataDir, async (store) => {
      assert.equal((await store.getPat(id))?.name, '')
    })
    // A revoked key the file describes as it is (export lists revoked keys too): unchanged.
    writeFileSync(file, `keys:\n  - id: ${revoked}\n    subject: gone\n`)
    assert.equal((await cli(['apply', '-f', file], { dataDir })).code, 0)
  })
})
