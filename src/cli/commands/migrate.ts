import { ADMIN_OVERRIDES, type CommandDef, withStore } from '../context.ts'

const migrate: CommandDef = {
  path: ['migrate'],
  summary: 'Apply pending store migrations (the server also applies them on start)',
  options: {},
  async run(ctx) {
    const config = ctx.config(ADMIN_OVERRIDES)
    const { kind, applied } = await withStore(
      config,
      async (store, versions) => ({
        kind: store.kind,
        applied: versions,
      }),
      ctx.io,
    )
    if (ctx.json) ctx.out.json({ store: kind, applied })
    else if (applied.length === 0)
      ctx.out.line(`The ${kind} store is up to date; no migration applied.`)
    else
      ctx.out.line(
        `Applied ${kind} migration${applied.length === 1 ? '' : 's'} ${applied.join(', ')}.`,
      )
    return 0
  },
}

/** `migrate`. */
export const migrateCommands: readonly CommandDef[] = [migrate]
