import type { CommandDef } from '../context.ts'

const openapi: CommandDef = {
  path: ['openapi'],
  summary: 'Print the OpenAPI 3.1 document of the /api/v1 API as JSON',
  options: {},
  examples: ['tokengate openapi > openapi.json'],
  async run(ctx) {
    const { openApiDocument } = await import('../../server/openapi.ts')
    const { v1Routes } = await import('../../server/routes/v1/index.ts')
    ctx.out.json(openApiDocument(v1Routes))
    return 0
  },
}

/** `openapi`. */
export const openapiCommands: readonly CommandDef[] = [openapi]
