import { type UsageSeries, usageCsv, usageView } from '../auth/usage.ts'
import { flag } from './args.ts'
import type { CommandContext } from './context.ts'
import { formatTime } from './output.ts'

/** Prints a usage series as a table, CSV or JSON. */
export function printUsage(ctx: CommandContext, series: UsageSeries): void {
  if (flag(ctx.args, 'csv')) {
    ctx.out.line(usageCsv(series).trimEnd().split('\r\n').join('\n'))
    return
  }
  if (ctx.json) {
    ctx.out.json(usageView(series))
    return
  }
  ctx.out.table(
    ['START', 'ALLOWED', '401', '403', '429'],
    series.points
      .filter((p) => p.allowed + p.unauthorized + p.forbidden + p.limited > 0)
      .map((p) => [
        formatTime(p.start),
        String(p.allowed),
        String(p.unauthorized),
        String(p.forbidden),
        String(p.limited),
      ]),
  )
  const t = series.totals
  ctx.out.line(
    `total ${formatTime(series.since)} to ${formatTime(series.until)} (per ${series.resolution}): ${t.allowed} allowed, ${t.unauthorized} 401, ${t.forbidden} 403, ${t.limited} 429`,
  )
}
