import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { PostgresStore } from '../../src/stores/postgres.ts'
import { skipReason } from '../helpers/services.ts'
import {
  type Instance,
  issueOperatorToken,
  startTwoInstances,
  type TwoInstances,
} from './cluster.ts'

/**
 * Console sessions live in Postgres (issue #25): signed in on instance A, the operator is
 * served by B without sticky sessions, a token issued through A is shown once through B, and
 * signing out on B ends the session on A.
 */
describe('console sessions shared by every instance', { skip: skipReason('postgres') }, () => {
  let two: TwoInstances
  let admin: PostgresStore
  let a: Instance
  let b: Instance
  let operatorToken: string

  before(async () => {
    two = await startTwoInstances({
      overrides: { admin: { enabled: true, port: 0 } },
      prepare: async (_admin, url) => {
        operatorToken = await issueOperatorToken(url)
      },
    })
    ;({ admin, a, b } = two)
  })
  after(() => two?.close())

  /** A console request to `instance`'s admin listener, as a browser there would send it. */
  async function call(
    instance: Instance,
    path: string,
    options: { cookie?: string; form?: Record<string, string> } = {},
  ) {
    const base = instance.running.adminUrl as string
    const response = await fetch(`${base}${path}`, {
      method: options.form ? 'POST' : 'GET',
      redirect: 'manual',
      headers: {
        ...(options.cookie ? { cookie: options.cookie } : {}),
        ...(options.form
          ? { origin: new URL(base).origin, 'content-type': 'application/x-www-form-urlencoded' }
          : {}),
      },
      body: options.form ? new URLSearchParams(options.form).toString() : undefined,
    })
    return {
      status: response.status,
      location: response.headers.get('location'),
      cookie: response.headers.get('set-cookie')?.split(';')[0],
      text: await response.text(),
    }
  }

  it('sign in on A, use B, see a new token once on B, sign out on B, refused on A', async () => {
    const signIn = await call(a, '/admin/sign-in', { form: { credential: operatorToken } })
    assert.equal(signIn.status, 303)
    const cookie = signIn.cookie as string
    assert.ok(cookie)

    const onB = await call(b, '/admin/tenants', { cookie })
    assert.equal(onB.status, 200)
    assert.match(onB.text, /acme/)
    const csrf = /name="_csrf" value="([\w-]+)"/.exec(onB.text)?.[1] as string

    const issued = await call(a, '/admin/pats', {
      cookie,
      form: { _csrf: csrf, tenantId: 'acme', subject: 'ci', permissions: 'tokens:read' },
    })
    assert.equal(issued.location, '/admin/pats/issued')
    const shown = await call(b, '/admin/pats/issued', { cookie })
    const token = /id="new-token" readonly value="(pat_\w+)"/.exec(shown.text)?.[1]
    assert.ok(token, 'the token is shown on B')
    const stored = JSON.stringify(
      await admin.admin.findSession(
        (await import('node:crypto')).hash('sha256', cookie.split('=')[1] as string, 'hex'),
      ),
    )
    assert.ok(!stored.includes(token), 'never stored readable')
    assert.doesNotMatch((await call(a, '/admin/pats/issued', { cookie })).text, /pat_/)

    const out = await call(b, '/admin/sign-out', { cookie, form: { _csrf: csrf } })
    assert.equal(out.status, 303)
    const after = await call(a, '/admin/tenants', { cookie })
    assert.equal(after.status, 303)
    assert.equal(after.location, '/admin/sign-in?ended=1')
  })
})
