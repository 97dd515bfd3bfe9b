/**
 * The console in a real browser (Debian's chromium through playwright-core; nothing is
 * downloaded): the operator journey end to end, the read-only role, a cross-origin forgery,
 * and a screenshot of every page into docs/console/ (the README shows them).
 */
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { launchChromium } from '../helpers/browser.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { type PostgresServer, skipReason, startPostgres } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

// `TOKENGATE_SCREENSHOTS=docs` writes them where the README and docs/console.md show them;
// otherwise into a temporary directory, so a test run leaves the working tree clean.
const SHOTS =
  process.env.TOKENGATE_SCREENSHOTS === 'docs'
    ? fileURLToPath(new URL('../../docs/console/', import.meta.url))
    : tempDir('tg-console-shots-')
const skip = skipReason('chromium')

describe('web console in chromium', { skip }, () => {
  let server: TestServer
  let browser: Browser
  let operator: string
  let readOnly: string
  let admin: string
  const timings: [string, number][] = []

  async function timed<T>(name: string, work: () => Promise<T>): Promise<T> {
    const start = performance.now()
    try {
      return await work()
    } finally {
      timings.push([name, Math.round(performance.now() - start)])
    }
  }

  before(async () => {
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      usage: { flushIntervalMs: 100 },
    })
    admin = server.running.adminUrl as string
    ;({ token: operator } = await issueAdminTokenCli(server, 'alice', 'operator'))
    ;({ token: readOnly } = await issueAdminTokenCli(server, 'rory', 'read-only'))
    browser = await launchChromium(server.ca)
    mkdirSync(SHOTS, { recursive: true })
  })
  after(async () => {
    await browser?.close()
    await server?.close()
    if (timings.length > 0) {
      console.log(
        `console browser timings (ms): ${timings.map(([n, ms]) => `${n}=${ms}`).join(', ')}`,
      )
    }
  })

  const signIn = (context: BrowserContext, token: string) => signInAt(context, admin, token)

  const shot = (page: Page, name: string) =>
    page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true })

  test('operator journey: sign in, tenant, PAT shown once, works, revoked within a second, audited', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    const cspViolations: string[] = []
    try {
      const page = await timed('sign-in', async () => {
        const p = await context.newPage()
        p.on('console', (m) => {
          if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text())
        })
        await p.goto(`${admin}/admin/`)
        await p.waitForURL(`${admin}/admin/sign-in`)
        await shot(p, 'sign-in')
        await p.getByLabel('Admin token or operator JWT').fill(operator)
        await p.getByRole('button', { name: 'Sign in' }).click()
        await p.waitForURL(`${admin}/admin/tenants`)
        return p
      })
      assert.equal(await page.getByTestId('operator').textContent(), 'admin:alice')
      const cookie = (await context.cookies()).find((c) => c.name === '__Host-tokengate-admin')
      assert.ok(cookie)
      assert.deepEqual([cookie.httpOnly, cookie.secure, cookie.sameSite], [true, true, 'Strict'])
      assert.ok(!page.url().includes(operator))

      await timed('create-tenant', async () => {
        await page.getByLabel('Tenant id').fill('acme')
        await page.getByLabel('Name', { exact: true }).fill('Acme Corp')
        await page.getByRole('button', { name: 'Create tenant' }).click()
        await page.getByText('Created tenant acme.').waitFor()
      })
      await shot(page, 'tenants')

      const token = await timed('issue-pat', async () => {
        await page.getByRole('link', { name: 'Tokens', exact: true }).click()
        await page.getByText('Issue a token').click()
        await page.getByLabel('Tenant', { exact: true }).last().selectOption('acme')
        await page.getByLabel('Subject', { exact: true }).last().fill('ci-bot')
        await page.getByLabel('Name', { exact: true }).last().fill('deploy')
        await page.getByLabel('Permissions (space-separated)').fill('tokens:read')
        await page.getByRole('button', { name: 'Issue token' }).click()
        await page.waitForURL(`${admin}/admin/pats/issued`)
        return page.getByTestId('new-token').inputValue()
      })
      assert.match(token, /^pat_[0-9A-Za-z]{38}$/)
      assert.ok(!page.url().includes(token))
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: admin })
      await page.getByRole('button', { name: 'Copy' }).click()
      await page.getByText('Copied.').waitFor()
      assert.equal(await page.evaluate(() => navigator.clipboard.readText()), token)
      await shot(page, 'pat-issued')

      await page.reload()
      assert.equal(await page.locator('h1').textContent(), 'Token already shown')
      assert.ok(!(await page.content()).includes(token))
      await page.goto(`${admin}/admin/pats?tenant=acme`)
      assert.ok(!(await page.content()).includes(token))

      const me = await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])
      assert.equal(me.status, 200)

      await shot(page, 'pats')
      page.once('dialog', (dialog) => void dialog.accept())
      const revokedAt = await timed('revoke', async () => {
        await page.getByRole('button', { name: /^Revoke token tok_/ }).click()
        await page.getByText(/^Revoked pat_…/).waitFor()
        return performance.now()
      })
      let status = 0
      let elapsed = 0
      do {
        status = (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status
        elapsed = performance.now() - revokedAt
      } while (status !== 401 && elapsed < 5000)
      assert.equal(status, 401)
      assert.ok(elapsed < 1000, `401 after ${Math.round(elapsed)} ms`)
      timings.push(['revoke-to-401', Math.round(elapsed)])

      await timed('audit', async () => {
        await page.getByRole('link', { name: 'Audit log' }).click()
        await page.getByLabel('Tenant', { exact: true }).fill('acme')
        await page.getByRole('button', { name: 'Filter' }).click()
        await page.waitForURL(/\/admin\/audit\?tenant=acme/)
      })
      const rows = await page
        .locator('#audit-table tbody tr')
        .evaluateAll((trs) =>
          trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
        )
      const byType = new Map(rows.map((r) => [r[1], r[3]]))
      assert.equal(byType.get('pat.issued'), 'admin:alice')
      assert.equal(byType.get('pat.revoked'), 'admin:alice')
      assert.equal(byType.get('tenant.created'), 'admin:alice')
      // Times are shown in the viewer's zone, ISO on hover.
      const firstTime = page.locator('#audit-table time').first()
      assert.match(String(await firstTime.getAttribute('title')), /^\d{4}-\d\d-\d\dT.*Z$/)
      assert.notEqual(await firstTime.textContent(), await firstTime.getAttribute('title'))

      // Live tail: an event made elsewhere appears without a reload.
      await timed('live-tail', async () => {
        await page.getByLabel('Live tail').check()
        const disabled = await adminRequest(server, '/admin/api/v1/tenants/acme/disable', {
          method: 'POST',
          headers: bearer(operator),
        })
        assert.equal(disabled.status, 200)
        await page.locator('#audit-table tbody tr', { hasText: 'tenant.disabled' }).waitFor()
      })
      await shot(page, 'audit')

      for (let i = 0; i < 20; i++) await server.request('/api/v1/me')
      await page.getByRole('link', { name: 'Issuers' }).click()
      await page.locator('h1', { hasText: 'Trusted issuers' }).waitFor()
      await shot(page, 'issuers')
      await page.getByRole('link', { name: 'Status' }).click()
      await page.locator('svg[role="img"]').waitFor()
      await shot(page, 'status')
      assert.deepEqual(cspViolations, [])
    } finally {
      await context.close()
    }
  })

  test('read-only operator: no write controls, and a forged write is refused', async () => {
    const context = await browser.newContext()
    try {
      const page = await signIn(context, readOnly)
      assert.equal(await page.getByRole('button', { name: 'Create tenant' }).count(), 0)
      assert.equal(await page.getByRole('button', { name: /^(Disable|Enable) tenant/ }).count(), 0)
      await page.goto(`${admin}/admin/pats`)
      assert.equal(await page.getByText('Issue a token').count(), 0)
      assert.equal(await page.getByRole('button', { name: /^Revoke/ }).count(), 0)
      // Even with a valid CSRF token from its own page, the server refuses the write.
      const csrf = await page.locator('input[name="_csrf"]').first().inputValue()
      const status = await page.evaluate(async (csrfToken) => {
        const response = await fetch('/admin/tenants', {
          method: 'POST',
          body: new URLSearchParams({ _csrf: csrfToken, id: 'ro-console' }),
        })
        return response.status
      }, csrf)
      assert.equal(status, 403)
      const tenants = await adminRequest(server, '/admin/api/v1/tenants', {
        headers: bearer(operator),
      })
      assert.ok(!(tenants.json.tenants as { id: string }[]).some((t) => t.id === 'ro-console'))
    } finally {
      await context.close()
    }
  })

  test('CSRF: a form on another origin cannot make a signed-in operator write', async () => {
    const evil = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' })
      res.end(`<!doctype html><form id="f" method="post" action="${admin}/admin/tenants">
<input name="id" value="evil-browser"></form><script>document.getElementById('f').submit()</script>`)
    })
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve))
    const context = await browser.newContext()
    try {
      const page = await signIn(context, operator)
      const { port } = evil.address() as AddressInfo
      await page.goto(`http://127.0.0.1:${port}/`)
      await page.waitForURL((url) => url.href.startsWith(admin), { timeout: 10_000 })
      const tenants = await adminRequest(server, '/admin/api/v1/tenants', {
        headers: bearer(operator),
      })
      assert.ok(!(tenants.json.tenants as { id: string }[]).some((t) => t.id === 'evil-browser'))
    } finally {
      await context.close()
      evil.close()
    }
  })

  test('CSRF layers on their own: the session cookie without the CSRF token, or from another origin, is refused', async () => {
    const context = await browser.newContext()
    try {
      const page = await signIn(context, operator)
      const cookie = (await context.cookies()).find((c) => c.name === '__Host-tokengate-admin')
      const csrf = await page.locator('input[name="_csrf"]').first().inputValue()
      const post = (headers: Record<string, string>, body: string) =>
        new Promise<number>((resolve, reject) => {
          const req = https.request(
            `${admin}/admin/tenants`,
            {
              method: 'POST',
              ca: server.ca,
              headers: {
                cookie: `__Host-tokengate-admin=${cookie?.value}`,
                'content-type': 'application/x-www-form-urlencoded',
                ...headers,
              },
            },
            (res) => {
              res.resume()
              resolve(res.statusCode ?? 0)
            },
          )
          req.on('error', reject)
          req.end(body)
        })
      const origin = new URL(admin).origin
      assert.equal(await post({ origin: 'https://evil.example' }, `_csrf=${csrf}&id=x1`), 403)
      assert.equal(await post({}, `_csrf=${csrf}&id=x2`), 403)
      assert.equal(await post({ origin }, 'id=x3'), 403)
      assert.equal(await post({ origin }, `_csrf=${csrf}x&id=x4`), 403)
      assert.equal(await post({ origin }, `_csrf=${csrf}&id=x5`), 303)
      const tenants = await adminRequest(server, '/admin/api/v1/tenants', {
        headers: bearer(operator),
      })
      const ids = (tenants.json.tenants as { id: string }[]).map((t) => t.id)
      assert.deepEqual(
        ['x1', 'x2', 'x3', 'x4', 'x5'].filter((id) => ids.includes(id)),
        ['x5'],
      )
    } finally {
      await context.close()
    }
  })

  test('revoking the admin token ends its console session', async () => {
    const { token, id } = await issueAdminTokenCli(server, 'brief', 'operator')
    const context = await browser.newContext()
    try {
      const page = await signIn(context, token)
      assert.equal((await server.cli('admin', 'token', 'revoke', id)).code, 0)
      await page.goto(`${admin}/admin/pats`)
      await page.waitForURL(`${admin}/admin/sign-in?ended=1`)
      assert.match(
        String(await page.getByTestId('session-ended').textContent()),
        /^Your session has ended/,
      )
    } finally {
      await context.close()
    }
  })

  test('keys as a product: issue with a quota, edit (a refused value stays, named), disable, usage chart', () =>
    keysJourney({ server, browser, admin, operator, shot }))

  test('no word is broken across lines at 700 px, on every page', async () => {
    const context = await browser.newContext({ viewport: { width: 700, height: 900 } })
    try {
      const page = await signIn(context, operator)
      const keyId = (
        await adminRequest(server, '/admin/api/v1/pats?tenant=keys', { headers: bearer(operator) })
      ).json.tokens as { id: string }[]
      const paths = [
        'tenants',
        'tenants/keys',
        'pats',
        ...(keyId[0] ? [`pats/${keyId[0].id}`] : []),
        'issuers',
        'audit',
        'admin-tokens',
        'status',
      ]
      for (const path of paths) {
        await page.goto(`${admin}/admin/${path}`)
        // Every word (a run of letters) of the page's text must sit on one line: a word cut
        // by wrapping has more than one line box.
        const broken = await page.evaluate(() => {
          const found: string[] = []
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT)
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const text = node.textContent ?? ''
            for (const match of text.matchAll(/[A-Za-z][A-Za-z'’-]{3,}/g)) {
              const range = document.createRange()
              range.setStart(node, match.index)
              range.setEnd(node, match.index + match[0].length)
              const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)))
              if (lines.size > 1) found.push(match[0])
            }
          }
          return found
        })
        assert.deepEqual(broken, [], `${path}: words broken across lines`)
        const overflow = await page.evaluate(
          () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
        )
        assert.ok(overflow <= 0, `${path} scrolls sideways by ${overflow}px at 700 px`)
      }
      await page.goto(`${admin}/admin/audit`)
      // The first screen only: the whole log at 700 pixels is a very long picture.
      await page.screenshot({ path: join(SHOTS, 'audit-700px.png') })
    } finally {
      await context.close()
    }
  })

  test('usable: keyboard skip link with visible focus, no sideways scrolling at 200% zoom', async () => {
    // 200% zoom of a 1280-pixel window = a 640-CSS-pixel viewport.
    const context = await browser.newContext({ viewport: { width: 640, height: 800 } })
    try {
      const page = await signIn(context, operator)
      for (const path of ['tenants', 'pats', 'issuers', 'audit', 'admin-tokens', 'status']) {
        await page.goto(`${admin}/admin/${path}`)
        const overflow = await page.evaluate(
          () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
        )
        assert.ok(overflow <= 0, `${path} scrolls sideways by ${overflow}px at 200%`)
      }
      await page.keyboard.press('Tab')
      const focused = await page.evaluate(() => {
        const el = document.activeElement as HTMLElement
        return { text: el.textContent, outline: getComputedStyle(el).outlineStyle }
      })
      assert.equal(focused.text, 'Skip to content')
      assert.notEqual(focused.outline, 'none')
      await shot(page, 'status-200-percent')
    } finally {
      await context.close()
    }
  })
})

describe('web console in chromium, on Postgres', {
  skip: skipReason('chromium') || skipReason('postgres'),
}, () => {
  let pg: PostgresServer
  let server: TestServer
  let browser: Browser
  let operator: string

  before(async () => {
    pg = await startPostgres()
    const databaseUrl = await pg.createDatabase()
    server = await startTestServer({
      admin: { enabled: true, port: 0 },
      usage: { flushIntervalMs: 100 },
      databaseUrl,
    })
    const onStore = {
      ...server,
      cli: (...args: string[]) => server.cli(...args, '--database-url', databaseUrl),
    }
    ;({ token: operator } = await issueAdminTokenCli(onStore, 'alice', 'operator'))
    browser = await launchChromium(server.ca)
  })
  after(async () => {
    await browser?.close()
    await server?.close()
    await pg?.stop()
  })

  test('keys as a product through the console, on Postgres', () =>
    keysJourney({
      server,
      browser,
      admin: server.running.adminUrl as string,
      operator,
      shot: async () => {},
    }))
})

async function signInAt(context: BrowserContext, admin: string, token: string): Promise<Page> {
  const page = await context.newPage()
  await page.goto(`${admin}/admin/`)
  await page.getByLabel('Admin token or operator JWT').fill(token)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.waitForURL(`${admin}/admin/tenants`)
  return page
}

interface JourneyEnv {
  readonly server: TestServer
  readonly browser: Browser
  readonly admin: string
  readonly operator: string
  readonly shot: (page: Page, name: string) => Promise<unknown>
}

/**
 * The operator's journey through keys as a product, run on SQLite (with screenshots) and on
 * Postgres: issue with a quota and a rate limit, a refused edit that keeps what was typed, the
 * usage chart, disable (401 within a second), the tenant's page, an admin token, the audit log's
 * before → after, the cluster status.
 */
async function keysJourney({ server, browser, admin, operator, shot }: JourneyEnv): Promise<void> {
  const signIn = (context: BrowserContext, token: string) => signInAt(context, admin, token)

  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  const cspViolations: string[] = []
  try {
    const page = await signIn(context, operator)
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text())
    })
    await page.getByLabel('Tenant id').fill('keys')
    await page.getByRole('button', { name: 'Create tenant' }).click()
    await page.getByText('Created tenant keys.').waitFor()
    await page.getByRole('link', { name: 'Tokens', exact: true }).click()
    await page.getByText('Issue a token').click()
    await page.getByLabel('Tenant', { exact: true }).last().selectOption('keys')
    await page.getByLabel('Subject', { exact: true }).last().fill('partner-api')
    await page.getByLabel('Name', { exact: true }).last().fill('partner')
    await page.getByLabel('Permissions (space-separated)').fill('tokens:read')
    await page.locator('#i-quotaLimit').fill('1000')
    await page.locator('#i-quotaRefill').selectOption('monthly')
    await page.locator('#i-rateLimitMax').fill('20')
    await page.locator('#i-rateLimitWindowSec').fill('1')
    await page.locator('#i-externalId').fill('cus_4711')
    await page.getByRole('button', { name: 'Issue token' }).click()
    await page.waitForURL(`${admin}/admin/pats/issued`)
    const token = await page.getByTestId('new-token').inputValue()
    for (let i = 0; i < 5; i++) {
      assert.equal(
        (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status,
        200,
      )
    }
    await server.request('/api/v1/audit-events', ['Authorization', `Bearer ${token}`])

    await page.goto(`${admin}/admin/pats?externalId=cus_4711`)
    await page.locator('tbody a').first().click()
    await page.waitForURL(/\/admin\/pats\/tok_/)
    const keyUrl = page.url()
    await page.getByText('uses left').waitFor()
    // A refused edit: the page comes back with what was typed, the field named and marked.
    await page.locator('#e-quotaLimit').fill('0')
    await page.locator('#e-name').fill('partner (renamed)')
    await page.getByRole('button', { name: 'Save key' }).click()
    await page.locator('#e-quotaLimit-error').waitFor()
    assert.equal(
      await page.locator('#e-quotaLimit-error').textContent(),
      'quota: 0 is not valid; expected a whole number of uses from 1 to 1000000000000',
    )
    assert.equal(await page.locator('#e-quotaLimit').inputValue(), '0')
    assert.equal(await page.locator('#e-quotaLimit').getAttribute('aria-invalid'), 'true')
    assert.equal(await page.locator('#e-name').inputValue(), 'partner (renamed)')
    await shot(page, 'pat-edit-refused')
    await page.locator('#e-quotaLimit').fill('500')
    await page.getByRole('button', { name: 'Save key' }).click()
    await page.getByText(/^Saved tok_/).waitFor()
    assert.equal(page.url(), keyUrl)
    // Usage arrives from the write-behind within a flush; the chart has real time ticks.
    let reloads = 0
    while (!(await page.getByText(/5 uses|494 of 500/).count()) && reloads++ < 20) {
      await new Promise((resolve) => setTimeout(resolve, 150))
      await page.reload()
    }
    const ticks = await page.locator('svg .x-tick').allTextContents()
    assert.ok(ticks.length >= 4 && ticks.every((t) => /^\d\d:\d\d$/.test(t)), ticks.join(','))
    assert.match(
      String(await page.locator('svg title').first().textContent()),
      /requests per minute/,
    )
    await shot(page, 'pat-detail')

    page.once('dialog', (dialog) => void dialog.accept())
    await page.getByRole('button', { name: 'Disable key' }).click()
    await page.getByText(/is now disabled\.$/).waitFor()
    let status = 0
    const disabledAt = performance.now()
    do {
      status = (await server.request('/api/v1/me', ['Authorization', `Bearer ${token}`])).status
    } while (status !== 401 && performance.now() - disabledAt < 3000)
    assert.equal(status, 401)
    assert.ok(performance.now() - disabledAt < 1000)

    await page.goto(`${admin}/admin/tenants/keys?resolution=hour`)
    await page.getByText('Busiest keys').waitFor()
    await shot(page, 'tenant-detail')

    await page.getByRole('link', { name: 'Admin tokens' }).click()
    await page.getByLabel('Holder (name)').fill('bob')
    await page.getByLabel('Role').selectOption('read-only')
    await page.getByRole('button', { name: 'Issue admin token' }).click()
    await page.waitForURL(`${admin}/admin/pats/issued`)
    assert.match(await page.getByTestId('new-token').inputValue(), /^tga_/)
    await page.getByRole('link', { name: 'Done' }).click()
    await page.waitForURL(`${admin}/admin/admin-tokens`)
    await shot(page, 'admin-tokens')

    await page.getByRole('link', { name: 'Audit log' }).click()
    await page.getByLabel('Type').selectOption('pat.updated')
    await page.getByLabel('From (UTC day)').fill(new Date().toISOString().slice(0, 10))
    await page.getByLabel('To (UTC day, included)').fill(new Date().toISOString().slice(0, 10))
    await page.getByRole('button', { name: 'Filter' }).click()
    await page.waitForURL(/type=pat.updated/)
    const details = await page
      .locator('#audit-table tbody tr')
      .first()
      .locator('.details')
      .textContent()
    assert.match(
      String(details),
      /quota\s*\{"limit":1000,"refill":"monthly"\} → \{"limit":500,"refill":"monthly"\}/,
    )
    await shot(page, 'audit-edits')

    await page.getByRole('link', { name: 'Status' }).click()
    await page.locator('svg[role="img"]').waitFor()
    assert.match(await page.locator('main').innerText(), /Requests, all instances/)
    await shot(page, 'status')
    assert.deepEqual(cspViolations, [])
  } finally {
    await context.close()
  }
}
