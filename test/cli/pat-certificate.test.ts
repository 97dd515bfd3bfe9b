/**
 * A PAT's certificate binding from the CLI (RFC 8705): `pat issue --bind-cert FILE` (PEM or
 * DER) and `--cert-thumbprint`, `pat edit --unbind-cert`, `apply` (a keys: entry's
 * certificateThumbprint) and `export`; bad input is a usage error naming the option; the
 * token is never printed again.
 */
import assert from 'node:assert/strict'
import { X509Certificate } from 'node:crypto'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { createTestCa } from '../helpers/test-ca.ts'
import { cli, cliJson, tempDataDir, withDataStore } from './helpers.ts'

describe('pat: certificate binding', () => {
  const data = tempDataDir()
  const dataDir = data.dir
  after(() => data.cleanup())
  const ca = createTestCa(dataDir)
  const client = ca.client('client-a')
  const other = ca.client('client-b')

  it('issue --bind-cert (PEM and DER) and --cert-thumbprint; edit --unbind-cert; apply and export', async () => {
    assert.equal((await cli(['tenant', 'create', 'acme'], { dataDir })).code, 0)
    const pem = await cliJson<{ id: string; token: string; certificateThumbprint: string }>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'a', '--bind-cert', client.certFile],
      { dataDir },
    )
    assert.equal(pem.certificateThumbprint, client.thumbprint)
    const derFile = join(dataDir, 'client-a.der')
    writeFileSync(derFile, new X509Certificate(client.cert).raw)
    const der = await cliJson<{ certificateThumbprint: string }>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'b', '--bind-cert', derFile],
      { dataDir },
    )
    assert.equal(der.certificateThumbprint, client.thumbprint)
    const byThumbprint = await cliJson<{ id: string; certificateThumbprint: string }>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'c', '--cert-thumbprint', other.thumbprint],
      { dataDir },
    )
    assert.equal(byThumbprint.certificateThumbprint, other.thumbprint)
    // One thumbprint in 64 starts with '-': it is still a value, not an option.
    const dashed = `-${other.thumbprint.slice(1)}`
    const byDashed = await cliJson<{ certificateThumbprint: string }>(
      ['pat', 'issue', '--tenant', 'acme', '--subject', 'd', '--cert-thumbprint', dashed],
      { dataDir },
    )
    assert.equal(byDashed.certificateThumbprint, dashed)

    const shown = await cli(['pat', 'show', pem.id], { dataDir })
    assert.equal(shown.code, 0, shown.stderr)
    assert.ok(shown.stdout.includes(client.thumbprint))
    assert.ok(!shown.stdout.includes(pem.token))

    assert.equal((await cli(['pat', 'edit', pem.id, '--unbind-cert'], { dataDir })).code, 0)
    await withDataStore(dataDir, async (store) => {
      assert.equal((await store.getPat(pem.id))?.certificateThumbprint, null)
    })

    // apply binds it again (through pat edit), and a second run changes nothing.
    const file = join(dataDir, 'keys.yaml')
    writeFileSync(
      file,
      `keys:\n  - id: ${pem.id}\n    certificateThumbprint: ${other.thumbprint}\n`,
    )
    const plan = await cli(['apply', '-f', file, '--dry-run'], { dataDir })
    assert.equal(plan.code, 3, plan.stderr)
    assert.match(plan.stdout, /certificate binding/)
    assert.equal((await cli(['apply', '-f', file], { dataDir })).code, 0)
    await withDataStore(dataDir, async (store) => {
      assert.equal((await store.getPat(pem.id))?.certificateThumbprint, other.thumbprint)
    })
    assert.equal((await cli(['apply', '-f', file, '--dry-run'], { dataDir })).code, 0)
    writeFileSync(file, `keys:\n  - id: ${pem.id}\n    certificateThumbprint: null\n`)
    assert.equal((await cli(['apply', '-f', file], { dataDir })).code, 0)
    await withDataStore(dataDir, async (store) => {
      assert.equal((await store.getPat(pem.id))?.certificateThumbprint, null)
    })

    const out = join(dataDir, 'exported')
    const exported = await cli(['export', '--out', out], { dataDir })
    assert.equal(exported.code, 0, exported.stderr)
    const written = readdirSync(out, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => readFileSync(join(entry.parentPath, entry.name), 'utf8'))
      .join('\n')
    assert.ok(written.includes(`certificateThumbprint: ${other.thumbprint}`), written)
    assert.ok(!written.includes(pem.token))
  })

  it('refused: both options, an unreadable or non-certificate file, a malformed thumbprint', async () => {
    const base = ['pat', 'issue', '--tenant', 'acme', '--subject', 'x']
    const both = await cli(
      [...base, '--bind-cert', client.certFile, '--cert-thumbprint', client.thumbprint],
      { dataDir },
    )
    assert.equal(both.code, 2)
    const missing = await cli([...base, '--bind-cert', join(dataDir, 'nope.pem')], { dataDir })
    assert.equal(missing.code, 2)
    assert.match(missing.stderr, /--bind-cert/)
    const notCert = join(dataDir, 'not-a-cert.pem')
    writeFileSync(notCert, 'hello\n')
    const garbage = await cli([...base, '--bind-cert', notCert], { dataDir })
    assert.equal(garbage.code, 2)
    assert.match(garbage.stderr, /holds no certificate/)
    const bad = await cli([...base, '--cert-thumbprint', 'abc'], { dataDir })
    assert.notEqual(bad.code, 0)
    assert.match(bad.stderr, /certificate thumbprint/)
    const file = join(dataDir, 'bad.yaml')
    writeFileSync(file, 'keys:\n  - id: tok_x\n    certificateThumbprint: abc\n')
    const applied = await cli(['apply', '-f', file], { dataDir })
    assert.notEqual(applied.code, 0)
    assert.match(applied.stderr, /certificateThumbprint/)
  })
})
