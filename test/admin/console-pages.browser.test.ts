/**
 * The console's pages as an operator meets them, in Chromium: the tokens table at 1280 and
 * 800 px (every column, Revoke and Rotate included, in view without a sideways scroll), an
 * HTML 404 for an unknown console URL, empty states that say what is empty and why, every
 * refused field of the issue form at once, and a key's deeply nested metadata rendered in
 * bounded size (a raw request measures the page). Screenshots of the tokens and sign-in pages
 * at both widths go to docs/console/ with `TOKENGATE_SCREENSHOTS=docs`.
 */
import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { launchChromium } from '../helpers/browser.ts'
import { startTestServer, type TestServer } from '../helpers/server.ts'
import { skipReason } from '../helpers/services.ts'
import { tempDir } from '../helpers/temp-dir.ts'
import { adminRequest, bearer, issueAdminTokenCli } from './admin-client.ts'

const SHOTS =
  process.env.TOKENGATE_SCREENSHOTS === 'docs'
    ? fileURLToPath(new URL('../../docs/console/', import.meta.url))
    : tempDir('tg-console-pages-')

describe('console pages in chromium', { skip: skipReason('chromium') }, () => {
  let server: TestServer
  let browser: Browser
  let admin: string
  let operator: string

  before(async () => {
    server = await startTestServer({ admin: { enabled: true, port: 0 } })
    admin = server.running.adminUrl as string
    ;({ token: operator } = await issueAdminTokenCli(server, 'alice', 'operator'))
    for (const id of ['acme', 'globex-international-holdings']) {
      const r = await adminRequest(server, '/admin/api/v1/tenants', {
        method: 'POST',
        headers: bearer(operator),
        body: { id, name: `${id} corp` },
      })
      assert.equal(r.status, 201, r.text)
    }
    // Rows as wide as real ones: long subjects, names, permissions, limits and quotas.
    for (let i = 0; i < 3; i++) {
      const r = await adminRequest(server, '/admin/api/v1/pats', {
        method: 'POST',
        headers: bearer(operator),
        body: {
          tenantId: 'globex-international-holdings',
          subject: `deploy-pipeline-service-account-${i}@globex.example`,
          name: `nightly release pipeline ${i}`,
          permissions: ['tokens:read', 'tokens:revoke', 'audit:read', 'billing:write'],
          rateLimit: { max: 1200, windowSec: 60 },
          quota: { limit: 100000, refill: 'monthly' },
          externalId: `cus_${i}0000000000000`,
        },
      })
      assert.equal(r.status, 201, r.text)
    }
    browser = await launchChromium(server.ca)
    mkdirSync(SHOTS, { recursive: true })
  })
  after(async () => {
    await browser?.close()
    await server?.close()
  })

  async function signedIn(width: number): Promise<{ context: BrowserContext; page: Page }> {
    const context = await browser.newContext({ viewport: { width, height: 900 } })
    const page = await context.newPage()
    await page.goto(`${admin}/admin/sign-in`)
    await page.getByLabel('Admin token or operator JWT').fill(operator)
    await page.getByRole('button', { name: 'Sign in', exact: true }).click()
    await page.waitForURL(`${admin}/admin/tenants`)
    return { context, page }
  }

  for (const width of [1280, 800]) {
    test(`tokens page at ${width} px: every column and the Revoke and Rotate buttons in view, no sideways scroll`, async () => {
      const { context, page } = await signedIn(width)
      try {
        await page.goto(`${admin}/admin/pats`)
        const layout = await page.evaluate(() => {
          const root = document.documentElement
          const wrap = document.querySelector('.table-wrap') as HTMLElement
          const inView = (el: Element) => {
            const r = el.getBoundingClientRect()
            const w = wrap.getBoundingClientRect()
            return (
              r.width > 0 &&
              r.left >= w.left - 1 &&
              r.right <= Math.min(w.right, root.clientWidth) + 1
            )
          }
          const buttons = [...document.querySelectorAll('tbody button')]
          return {
            pageOverflow: root.scrollWidth - root.clientWidth,
            tableOverflow: wrap.scrollWidth - wrap.clientWidth,
            buttons: buttons.length,
            rows: document.querySelectorAll('tbody tr').length,
            hidden: buttons.filter((b) => !inView(b)).map((b) => b.getAttribute('aria-label')),
          }
        })
        assert.equal(layout.buttons, layout.rows * 2, 'a Revoke and a Rotate button per token')
        assert.ok(layout.rows >= 4)
        assert.ok(layout.pageOverflow <= 0, `the page scrolls sideways by ${layout.pageOverflow}px`)
        assert.ok(
          layout.tableOverflow <= 0,
          `the table scrolls sideways by ${layout.tableOverflow}px inside its box`,
        )
        assert.deepEqual(layout.hidden, [], 'buttons out of view')
        await page.screenshot({ path: join(SHOTS, `pats-${width}px.png`), fullPage: true })
      } finally {
        await context.close()
      }
    })

    test(`sign-in page at ${width} px`, async () => {
      const context = await browser.newContext({ viewport: { width, height: 700 } })
      try {
        const page = await context.newPage()
        await page.goto(`${admin}/admin/sign-in`)
        const overflow = await page.evaluate(
          () => document.documentElement.scrollWidth - document.documentElement.clientWidth,
        )
        assert.ok(overflow <= 0)
        await page.screenshot({ path: join(SHOTS, `sign-in-${width}px.png`), fullPage: true })
      } finally {
        await context.close()
      }
    })
  }

  for (const width of [1280, 800]) {
    test(`every page at ${width} px: no table hides columns behind a sideways scroll`, async () => {
      const { context, page } = await signedIn(width)
      try {
        const [first] = (
          await adminRequest(server, '/admin/api/v1/pats', { headers: bearer(operator) })
        ).json.tokens as { id: string }[]
        const paths = [
          'tenants',
          'tenants/globex-international-holdings',
          'pats',
          `pats/${first?.id}`,
          'issuers',
          'audit',
          'admin-tokens',
          'status',
        ]
        const hidden: string[] = []
        for (const path of paths) {
          await page.goto(`${admin}/admin/${path}`)
          const overflow = await page.evaluate(() => ({
            page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
            tables: [...document.querySelectorAll('.table-wrap')].map(
              (w) => w.scrollWidth - w.clientWidth,
            ),
          }))
          if (overflow.page > 0) hidden.push(`${path}: the page by ${overflow.page}px`)
          for (const [i, by] of overflow.tables.entries()) {
            if (by > 0) hidden.push(`${path}: table ${i + 1} by ${by}px`)
          }
        }
        assert.deepEqual(hidden, [])
      } finally {
        await context.close()
      }
    })
  }

  test('an unknown console URL is an HTML 404 page with a way back, signed in or not', async () => {
    const { context, page } = await signedIn(1280)
    try {
      for (const path of ['/admin/no-such-page', '/admin/pats/tok_x/nothing-here', '/nope']) {
        const response = await page.goto(`${admin}${path}`)
        assert.equal(response?.status(), 404, path)
        assert.match(String(response?.headers()['content-type']), /^text\/html/, path)
        assert.equal(await page.locator('h1').textContent(), 'Page not found')
        assert.ok(await page.getByRole('link', { name: 'Tenants' }).count())
        assert.equal(await page.getByTestId('operator').textContent(), 'admin:alice')
      }
      // A page about a token or tenant that does not exist says so, with a 404 too.
      for (const [path, title] of [
        ['/admin/pats/tok_doesnotexist', 'No such token'],
        ['/admin/tenants/no-such-tenant', 'No such tenant'],
      ] as const) {
        const response = await page.goto(`${admin}${path}`)
        assert.equal(response?.status(), 404, path)
        assert.equal(await page.locator('h1').textContent(), title)
      }
      const anonymous = await browser.newContext()
      const p = await anonymous.newPage()
      const response = await p.goto(`${admin}/admin/nothing`)
      assert.equal(response?.status(), 404)
      assert.equal(await p.locator('h1').textContent(), 'Page not found')
      assert.ok(await p.getByRole('link', { name: 'Sign in' }).count())
      await anonymous.close()
      // The API keeps answering problems in JSON.
      const api = await adminRequest(server, '/admin/api/v1/nothing', { headers: bearer(operator) })
      assert.equal(api.status, 404)
      assert.match(String(api.headers['content-type']), /^application\/problem\+json/)
    } finally {
      await context.close()
    }
  })

  test('a search that matches nothing says what is empty and why, with a way to clear it', async () => {
    const { context, page } = await signedIn(1280)
    try {
      await page.goto(`${admin}/admin/pats?subject=nobody-at-all`)
      const empty = page.getByTestId('empty')
      assert.equal(
        await empty.textContent(),
        'No tokens match subject “nobody-at-all”. Clear the search to see every token.',
      )
      await page.getByRole('link', { name: 'Clear the search' }).click()
      await page.waitForURL(`${admin}/admin/pats`)
      const all = await page.locator('tbody tr').count()
      assert.ok(all >= 4)
      await page.goto(`${admin}/admin/pats?tenant=acme`)
      assert.match(String(await empty.textContent()), /^No tokens match tenant “acme”\./)
      await page.goto(`${admin}/admin/audit?type=pat.revoked`)
      assert.match(String(await page.getByTestId('empty').textContent()), /^No audit events match/)
    } finally {
      await context.close()
    }
  })

  test('the issue form marks every refused field at once, keeping what was typed', async () => {
    const { context, page } = await signedIn(1280)
    try {
      await page.goto(`${admin}/admin/pats`)
      const before = await page.locator('tbody tr').count()
      await page.getByText('Issue a token').click()
      await page.locator('#i-subject').fill('bad\u0007subject')
      await page.locator('#i-permissions').fill('not a permission!')
      await page.locator('#i-expiresInDays').fill('soon')
      await page.locator('#i-quotaLimit').fill('0')
      await page.locator('#i-metadata').fill('{not json')
      await page.locator('#i-name').fill('kept name')
      await page.getByRole('button', { name: 'Issue token' }).click()
      await page.locator('.field-error').first().waitFor()
      const marked = await page
        .locator('[aria-invalid="true"]')
        .evaluateAll((els) => els.map((e) => e.getAttribute('name')))
      assert.deepEqual(marked.sort(), [
        'expiresInDays',
        'metadata',
        'permissions',
        'quotaLimit',
        'subject',
      ])
      assert.equal(await page.locator('.field-error').count(), 5)
      assert.match(
        String(await page.locator('form .notice.error').textContent()),
        /^Not saved: 5 fields need a change/,
      )
      assert.equal(await page.locator('#i-name').inputValue(), 'kept name')
      assert.equal(await page.locator('#i-metadata').inputValue(), '{not json')
      assert.equal(await page.locator('tbody tr').count(), before, 'nothing was issued')
    } finally {
      await context.close()
    }
  })

  test("a key's edit form marks every refused field at once too", async () => {
    const { context, page } = await signedIn(1280)
    try {
      await page.goto(`${admin}/admin/pats?tenant=globex-international-holdings`)
      await page.locator('tbody a').first().click()
      await page.waitForURL(/\/admin\/pats\/tok_/)
      await page.locator('#e-name').fill('bad\u0007name')
      await page.locator('#e-permissions').fill('tokens:read not!a:permission')
      await page.locator('#e-rateLimitMax').fill('0')
      await page.locator('#e-metadata').fill('[1, 2]')
      await page.getByRole('button', { name: 'Save key' }).click()
      await page.locator('.field-error').first().waitFor()
      const marked = await page
        .locator('[aria-invalid="true"]')
        .evaluateAll((els) => els.map((e) => e.getAttribute('name')))
      assert.deepEqual(marked.sort(), ['metadata', 'name', 'permissions', 'rateLimitMax'])
      assert.equal(
        await page.locator('#e-permissions').inputValue(),
        'tokens:read not!a:permission',
      )
    } finally {
      await context.close()
    }
  })

  test('4 KB of nested metadata renders in bounded size, linear in the input (raw request)', async () => {
    // 2,000 levels of arrays in an object: 4,009 bytes of JSON.
    const metadata = { deep: JSON.parse(`${'['.repeat(2000)}${']'.repeat(2000)}`) }
    assert.ok(JSON.stringify(metadata).length <= 4096)
    const issued = await adminRequest(server, '/admin/api/v1/pats', {
      method: 'POST',
      headers: bearer(operator),
      body: { tenantId: 'acme', subject: 'deep', metadata },
    })
    assert.equal(issued.status, 201, issued.text)
    const signIn = await adminRequest(server, '/admin/sign-in', {
      method: 'POST',
      headers: {
        origin: new URL(admin).origin,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ credential: operator }).toString(),
    })
    assert.equal(signIn.status, 303, signIn.text)
    const cookie = String(signIn.headers['set-cookie']).split(';')[0] as string
    const page = await adminRequest(server, `/admin/pats/${issued.json.id}`, {
      headers: { cookie },
    })
    assert.equal(page.status, 200, `${page.headers.location ?? ''} ${page.text.slice(0, 300)}`)
    // The key's page with shallow metadata is ~15 KB; the metadata is shown twice (the facts
    // and the edit form), so 64 KB is linear room, and depth squared (megabytes) is refused.
    assert.ok(page.text.length < 64_000, `the key's page is ${page.text.length} bytes`)
    assert.ok(page.text.includes('[[[['), 'the metadata is shown')
  })
})
