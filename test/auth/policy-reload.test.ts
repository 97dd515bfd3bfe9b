/**
 * #16 declarative configuration: the running gateway reloads its policy on SIGHUP (a real
 * signal to the process hosting the server: this one, or the installed package's `serve`),
 * and keeps the last good policy when the file is broken.
 */
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { parsePolicy } from '../../src/auth/policy/policy.ts'
import { createReloadablePolicy } from '../../src/auth/policy/reload.ts'
import { type Gateway, startGateway, startUpstream, type Upstream } from '../gateway/harness.ts'

const DENY_REPORTS = `
rules:
  - methods: '*'
    path: /api/v1/reports/*
    deny: true
`
const ALLOW_REPORTS = `
rules:
  - methods: [GET]
    path: /api/v1/reports/*
    permissions: [reports:read]
  - methods: '*'
    path: /api/v1/internal/*
    deny: true
`
const BROKEN = `
rules:
  - methods: [get]
    path: /api/v1/reports/*
`

async function statusOf(gateway: Gateway, path: string, token: string): Promise<number> {
  const response = await fetch(`${gateway.url}${path}`, {
    headers: { authorization: `Bearer ${token}` },
  })
  await response.arrayBuffer()
  return response.status
}

async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 5_000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

describe('gateway: policy reload on SIGHUP', () => {
  let upstream: Upstream
  let gateway: Gateway
  before(async () => {
    upstream = await startUpstream()
    gateway = await startGateway({ upstream: upstream.url, policy: DENY_REPORTS })
  })
  after(async () => {
    await gateway.close()
    await upstream.close()
  })

  test('an edited policy applies after SIGHUP; a broken edit keeps the last good one', async () => {
    const token = await gateway.pat(['reports:read'])
    const file = gateway.policyFile as string
    assert.equal(await statusOf(gateway, '/api/v1/reports/1', token), 404)

    writeFileSync(file, ALLOW_REPORTS)
    gateway.running.signal('SIGHUP')
    await eventually('the new policy', async () => {
      return (await statusOf(gateway, '/api/v1/reports/1', token)) === 200
    })
    assert.equal(await statusOf(gateway, '/api/v1/internal/x', token), 404)

    writeFileSync(file, BROKEN)
    gateway.running.signal('SIGHUP')
    await sleep(500)
    assert.equal(await statusOf(gateway, '/api/v1/reports/1', token), 200)
    assert.equal(await statusOf(gateway, '/api/v1/internal/x', token), 404)
  })
})

describe('createReloadablePolicy', () => {
  test('logs every problem of a bad edit as file:line:col and keeps deciding', async () => {
    const { mkdtempSync, rmSync } = await import('node:fs')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const dir = mkdtempSync(join(tmpdir(), 'tokengate-reload-'))
    try {
      const file = join(dir, 'policy.yaml')
      writeFileSync(file, BROKEN)
      const logged: { level: string; fields: Record<string, unknown>; message: string }[] = []
      const log = {
        info: (fields: object, message: string) =>
          logged.push({ level: 'info', fields: fields as Record<string, unknown>, message }),
        error: (fields: object, message: string) =>
          logged.push({ level: 'error', fields: fields as Record<string, unknown>, message }),
      }
      const reloadable = createReloadablePolicy(file, parsePolicy(DENY_REPORTS), log)
      const result = await reloadable.reload()
      assert.equal(result.ok, false)
      assert.equal(logged[0]?.level, 'error')
      assert.match(
        String(logged[0]?.fields.problems),
        new RegExp(`${file}:3:15: rules\\[0\\]\\.methods`),
      )
      assert.match(logged[0]?.message ?? '', /keeping the last good policy/)

      writeFileSync(file, ALLOW_REPORTS)
      assert.deepEqual(await reloadable.reload(), { ok: true })
      assert.equal(logged[1]?.level, 'info')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
