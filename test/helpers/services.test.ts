import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { describe, it } from 'node:test'
import { Redis } from 'ioredis'
import pg from 'pg'
import { skipReason, startPostgres, startRedis } from './services.ts'

describe('throwaway redis', { skip: skipReason('redis') }, () => {
  it('starts on a free port, answers PING through ioredis, and is gone after stop', async () => {
    const server = await startRedis()
    const client = new Redis(server.url, { lazyConnect: true, maxRetriesPerRequest: 0 })
    try {
      await client.connect()
      assert.equal(await client.ping(), 'PONG')
      await client.set('k', 'v')
      assert.equal(await client.get('k'), 'v')
    } finally {
      client.disconnect()
      await server.stop()
    }
    const after = new Redis(server.url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    })
    after.on('error', () => {})
    await assert.rejects(after.connect())
    after.disconnect()
  })
})

describe('throwaway postgres', { skip: skipReason('postgres') }, () => {
  it('survives halt and start on the same port and data, and stop removes it', async () => {
    const server = await startPostgres()
    try {
      const url = await server.createDatabase()
      await query(url, 'CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)')
      await server.halt('immediate')
      await assert.rejects(query(url, 'SELECT 1'))
      await server.start()
      assert.deepEqual(await query(url, 'SELECT v FROM kept'), [{ v: 7 }])
    } finally {
      await server.stop()
    }
    assert.equal(existsSync(server.dataDir), false)
    await assert.rejects(query(server.url, 'SELECT 1'))
  })
})

describe('skipReason', () => {
  // A child process with an empty PATH has no redis-server to find.
  function redisSkipWithoutBinaries(ci: string | undefined): string {
    const env: Record<string, string> = { PATH: '' }
    if (ci !== undefined) env.CI = ci
    const script = `import { skipReason } from ${JSON.stringify(new URL('./services.ts', import.meta.url).href)}
      try { console.log(JSON.stringify(skipReason('redis'))) } catch (e) { console.log('threw: ' + e.message) }`
    return execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      env,
      encoding: 'utf8',
    }).trim()
  }

  it('names the missing binary when not under CI', () => {
    assert.match(redisSkipWithoutBinaries(undefined), /^"redis unavailable: no redis-server/)
  })

  it('throws instead of skipping under CI=true', () => {
    assert.match(redisSkipWithoutBinaries('true'), /^threw: CI=true but redis cannot be started/)
  })
})

async function query(url: string, sql: string): Promise<unknown[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 })
  client.on('error', () => {})
  await client.connect()
  try {
    const result = await client.query(sql)
    return Array.isArray(result) ? [] : result.rows
  } finally {
    await client.end()
  }
}
