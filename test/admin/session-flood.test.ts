/**
 * The attack of issue #25: one read-only admin token signs in over and over. Sessions were
 * capped at 10,000 in all, oldest first, so ~10,000 sign-ins with ONE credential evicted every
 * other operator's session. Sessions are now capped per credential: the flood only ends the
 * flooder's own oldest sessions.
 */
import assert from 'node:assert/strict'
import https from 'node:https'
import { after, before, describe, it } from 'node:test'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { adminRequest, issueAdminTokenCli } from './admin-client.ts'

describe('console sign-in flood with one credential', () => {
  let server: TestServer
  let origin: string
  before(async () => {
    server = await startTestServer({ admin: { enabled: true, port: 0 }, log: { level: 'warn' } })
    origin = new URL(server.running.adminUrl as string).origin
  })
  after(() => server.close())

  /** Signs in with `credential`; returns the session cookie. */
  function signIn(credential: string, agent?: https.Agent): Promise<string> {
    return new Promise((resolve, reject) => {
      const req = https.request(
        `${server.running.adminUrl}/admin/sign-in`,
        {
          method: 'POST',
          agent,
          ca: server.ca,
          headers: { origin, 'content-type': 'application/x-www-form-urlencoded' },
        },
        (res) => {
          res.resume()
          res.on('end', () => {
            const cookie = String(res.headers['set-cookie'] ?? '').split(';')[0] ?? ''
            if (res.statusCode === 303 && cookie.includes('=')) resolve(cookie)
            else reject(new Error(`sign-in answered ${res.statusCode}`))
          })
        },
      )
      req.on('error', reject)
      req.end(new URLSearchParams({ credential }).toString())
    })
  }

  const signedIn = async (cookie: string) =>
    (await adminRequest(server, '/admin/tenants', { headers: { cookie } })).status === 200

  it("10,050 sign-ins with one read-only token do not end another operator's session", async () => {
    const { token: victimToken } = await issueAdminTokenCli(server, 'victim', 'operator')
    const { token: flooder } = await issueAdminTokenCli(server, 'flooder', 'read-only')
    const victim = await signIn(victimToken)
    const first = await signIn(flooder)
    assert.ok(await signedIn(victim))
    const agent = new https.Agent({ keepAlive: true, maxSockets: 16, ca: server.ca })
    try {
      let next = 0
      const worker = async () => {
        while (next++ < 10_050) await signIn(flooder, agent)
      }
      await Promise.all(Array.from({ length: 16 }, worker))
    } finally {
      agent.destroy()
    }
    assert.ok(await signedIn(victim), "the victim's session survived the flood")
    assert.equal(await signedIn(first), false, "the flooder's own oldest session was ended")
  })
})
