import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { parseRedisUrl } from '../../src/auth/redis-client.ts'

describe('redisUrl', () => {
  it('redis:// and rediss:// are one server, passed through as given', () => {
    for (const url of ['redis://127.0.0.1:6379', 'rediss://:p%40ss@cache.internal:6380/2']) {
      assert.deepEqual(parseRedisUrl(url), { mode: 'standalone', url })
    }
  })

  it('redis-sentinel:// names the sentinels, the master group, the database and the passwords', () => {
    assert.deepEqual(
      parseRedisUrl(
        'rediss-sentinel://app:s%3Acret@10.0.0.1:26379,[::1]:26380/mymaster/3?sentinelPassword=x%26y',
      ),
      {
        mode: 'sentinel',
        sentinels: [
          { host: '10.0.0.1', port: 26379 },
          { host: '::1', port: 26380 },
        ],
        name: 'mymaster',
        db: 3,
        tls: true,
        username: 'app',
        password: 's:cret',
        sentinelPassword: 'x&y',
      },
    )
    assert.deepEqual(parseRedisUrl('redis-sentinel://s1:26379/tokengate'), {
      mode: 'sentinel',
      sentinels: [{ host: 's1', port: 26379 }],
      name: 'tokengate',
      db: 0,
      tls: false,
    })
  })

  it('redis-cluster:// lists seed nodes', () => {
    assert.deepEqual(parseRedisUrl('redis-cluster://:pw@a:7000,b:7001'), {
      mode: 'cluster',
      nodes: [
        { host: 'a', port: 7000 },
        { host: 'b', port: 7001 },
      ],
      tls: false,
      password: 'pw',
    })
  })

  it('unusable URLs are refused without repeating them (they carry passwords)', () => {
    for (const url of [
      'redis-sentinel://:hunter2@s1:26379',
      'redis-sentinel://:hunter2@s1/master',
      'redis-cluster://:hunter2@a:7000/0',
      'redis-sentinel://:hunter2@s1:99999/master',
      'redis-sentinel://:hunter2@s1:26379/master/x',
      'memcached://:hunter2@x:1',
    ]) {
      assert.throws(
        () => parseRedisUrl(url),
        (error: Error) => error.name === 'RedisUrlError' && !error.message.includes('hunter2'),
        url,
      )
    }
  })
})
