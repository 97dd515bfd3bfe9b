import { readUsageSeries, usageCsv } from '../auth/usage.ts'
import type { UsageScope } from '../stores/store.ts'
import { rangeOf } from './api.ts'
import { usageChart } from './chart.ts'
import type { ConsoleKit, Query } from './console-kit.ts'
import { html } from './html.ts'
import { readStatus } from './status.ts'

/** The status page (cluster-wide requests from the store) and the console's usage CSV. */
export function registerStatusPage(kit: ConsoleKit): void {
  const { app, ctx, view, layout, sessionOf } = kit

  view('/admin/status', async (_request, session) => {
    const s = await readStatus(ctx)
    const rate = (n: number | null) => (n === null ? 'not counted' : `${n} per second`)
    return layout(
      'Status',
      session,
      html`<dl class="card status-list">
<dt>Overall</dt><dd><span class="status status-${s.status}">${s.status}</span></dd>
<dt>Store (${s.storeKind}, shared by every instance)</dt><dd>${s.store}</dd>
<dt>Requests, all instances (last 5 min)</dt><dd>${rate(s.rates.requestsPerSecond)}</dd>
<dt>Refused (401, 403, 429), all instances (last 5 min)</dt><dd>${rate(s.rates.failuresPerSecond)}</dd>
<dt>Change feed (this instance)</dt><dd>${s.changeFeed.state}</dd>
<dt>Issuers with remote keys (this instance)</dt><dd>${s.issuers.remote} (not loaded: ${s.issuers.notLoaded.join(', ') || 'none'}; stale: ${s.issuers.stale.join(', ') || 'none'})</dd>
</dl>
${
  s.series
    ? usageChart(s.series, 'Requests of every instance')
    : html`<p class="notice">Usage counting is off (usage.enabled), or the store is not reachable: no cluster-wide chart.</p>`
}`,
      'status',
    )
  })

  // The console's CSV of a usage series (the API's `format=csv`, on a session).
  app.get('/admin/usage.csv', async (request, reply) => {
    const session = await sessionOf(request)
    if (!session) return reply.redirect('/admin/sign-in', 303)
    const q = request.query as Query
    const scope = (['key', 'tenant'].includes(q.scope ?? '') ? q.scope : 'all') as UsageScope
    const series = await readUsageSeries(
      ctx.store,
      scope,
      scope === 'all' ? '' : (q.id ?? ''),
      rangeOf(q),
      ctx.clock.now(),
    )
    reply.header('content-disposition', 'attachment; filename="tokengate-usage.csv"')
    return reply.type('text/csv; charset=utf-8').send(usageCsv(series))
  })
}
