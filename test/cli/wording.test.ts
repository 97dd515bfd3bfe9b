/**
 * What the CLI prints reads right (issue #35): counts agree with their nouns ("1 tenant", not
 * "1 tenants"), and `migrate` shows ranges and names a withdrawn number instead of a list
 * that looks like a migration is missing ("1, 2, 3, 4, 6, 7"). The bin as a process.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { runTokengate } from '../helpers/launch.ts'
import { tempDir } from '../helpers/temp-dir.ts'

describe('CLI wording', () => {
  const dir = tempDir('tg-wording-')
  const run = (...args: string[]) => runTokengate(args, { cwd: dir })

  it('migrate prints ranges and says that 5 was withdrawn', async () => {
    const migrated = await run('migrate')
    assert.equal(migrated.code, 0, migrated.stderr)
    assert.match(
      migrated.stdout,
      /^Applied sqlite migrations 1–4 and 6–\d+ \(there is no migration 5: it was withdrawn before release\)\.\n$/,
    )
  })

  it('counts of one are singular: export, apply, policy set', async () => {
    const file = join(dir, 'tokengate.apply.yaml')
    writeFileSync(file, 'tenants:\n  - id: acme\n')
    const applied = await run('apply', '-f', file)
    assert.equal(applied.code, 0, applied.stderr)
    assert.match(applied.stdout, /Applied 1 change\.$/m)
    const exported = await run('export', '--out', join(dir, 'out'))
    assert.equal(exported.code, 0, exported.stderr)
    assert.match(exported.stdout, /: 1 tenant, 0 issuers, 0 keys \(no secret\)/)
    writeFileSync(
      join(dir, 'policy.yaml'),
      'default: authenticated\nrules:\n  - methods: [GET]\n    path: /api/v1/x\n    permissions: [x:read]\n',
    )
    const stored = await run('policy', 'set', join(dir, 'policy.yaml'))
    assert.equal(stored.code, 0, stored.stderr)
    assert.match(stored.stdout, /\(1 rule\)\./)
  })
})
