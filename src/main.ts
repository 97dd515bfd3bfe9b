import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { createSecureContext } from 'node:tls'
import type { FastifyInstance } from 'fastify'
import type { DestinationStream, Logger } from 'pino'
import type { AddressThrottle } from './auth/address-throttle.ts'
import { createAuthContext } from './auth/auth-context.ts'
import { type OpenedGate, openGate } from './auth/open-gate.ts'
import { startRetention } from './auth/retention.ts'
import type { Config } from './config/schema.ts'
import { type Clock, systemClock } from './core/ports.ts'
import { RequestClock } from './core/request-clock.ts'
import type { DecisionServer } from './decision/server.ts'
import type { DevSeed } from './dev/seed.ts'
import { type EventDelivery, startEventDelivery } from './events/start.ts'
import { createConnectionBudget } from './lib/connection-budget.ts'
import { createLogger } from './logger.ts'
import { fitToDescriptorLimit } from './server/descriptor-budget.ts'
import type { Metrics, MetricsListener } from './server/metrics.ts'
import { v1Routes } from './server/routes/v1/index.ts'
import { buildServer } from './server/server.ts'
import { ensureDevCertificate, readClientCa, readTlsFiles, type TlsMaterial } from './server/tls.ts'
import { SSF_CONFIGURATION_PATH } from './ssf/events.ts'
import type { SsfReceivers } from './ssf/receiver-setup.ts'
import {
  JWKS_PATH,
  ssfConfiguration,
  startTransmitter,
  type Transmitter,
} from './ssf/transmitter.ts'
import { countersLine, listenAs, listeningLine, storeLine, upstreamLine } from './startup.ts'
import { openStore } from './stores/open-store.ts'
import type { ChangeFeedStatus, Store } from './stores/store.ts'
import { propertyReader } from './stores/store-overrides.ts'

export interface RunningTokengate {
  /** e.g. `https://127.0.0.1:8443` */
  readonly url: string
  readonly devSeed: DevSeed | undefined
  readonly logger: Logger
  /**
   * The Postgres change feed (cross-instance cache invalidation) right now; undefined on
   * SQLite. For health checks and tests, e.g. to `pg_terminate_backend` its connection.
   */
  readonly changeFeed: ChangeFeedStatus | undefined
  /** `http://host:port/metrics` when `metrics.enabled`, else undefined. */
  readonly metricsUrl: string | undefined
  /** The admin listener (`https://host:port`, console at `/admin/`) when `admin.enabled`. */
  readonly adminUrl: string | undefined
  /** `http://host:port` (or `unix:<path>`, decision.socket) of the decision listener when `decision` is set. */
  readonly decisionUrl: string | undefined
  /** `http://host:port` of the Envoy gRPC ext_authz service when `decision.grpcPort` is set. */
  readonly decisionGrpcUrl: string | undefined
  /** Graceful: stop accepting, finish in-flight requests, flush last-used times and audit. */
  close(): Promise<void>
}

export interface StartOptions {
  readonly clock?: Clock
  /** Where log lines go (default stdout). */
  readonly logDestination?: DestinationStream
  /**
   * A node:cluster worker (src/server/workers.ts): the primary already migrated, seeded and
   * made the dev certificate, and serves `/metrics` for all workers, so this instance hands
   * its registry to prom-client's cluster aggregator instead of opening a metrics listener.
   */
  readonly worker?: boolean
}

/**
 * What must happen once per data directory before any instance serves: migrations, dev
 * seeding, the dev certificate and the identity-token keys. The primary of `server.workers > 1` runs it before forking.
 */
export async function prepareTokengate(
  config: Readonly<Config>,
  options: StartOptions = {},
): Promise<DevSeed | undefined> {
  const logger = createLogger(config.log.level, options.logDestination)
  const store = await openStore({ ...storeLocation(config), logger })
  try {
    const clock = options.clock ?? systemClock
    const devSeed = await migrateAndSeed(config, store, clock)
    await tlsFor(config)
    // Made here once, so that every worker reads the same identity keys file.
    await identitySignerFor(config, clock)
    return devSeed
  } finally {
    await store.close()
  }
}

async function migrateAndSeed(
  config: Readonly<Config>,
  store: Awaited<ReturnType<typeof openStore>>,
  clock: Clock,
): Promise<DevSeed | undefined> {
  await store.migrate()
  // Dev seeding (jose, for the dev issuer) is loaded only when configured: every module
  // skipped is start-up time saved.
  const devSeed = config.dev
    ? await (await import('./dev/seed.ts')).seedDevData(store, config.dataDir, clock.now())
    : undefined
  return devSeed
}

/**
 * The composition root: load nothing itself (config is given), open and migrate the store,
 * seed dev data, wire the auth core, build the server and listen.
 */
export async function startTokengate(
  config: Readonly<Config>,
  options: StartOptions = {},
): Promise<RunningTokengate> {
  // Read once per gated request, as in createTokengate (core/request-clock.ts).
  const clock = options.clock ?? new RequestClock()
  const logger = createLogger(config.log.level, options.logDestination)
  const store = await openStore({
    ...storeLocation(config),
    logger,
    secretKeyFile: config.secretKeyFile,
    changePollMs: config.store.changePollMs,
    offloadWrites: true,
  })
  for (const line of [storeLine(config), countersLine(config), upstreamLine(config)]) {
    if (line) logger.info(line.fields, line.msg)
  }
  // What a failed start must close again: never a half-started instance (startup.ts).
  let closeAuth: (() => Promise<void>) | undefined
  let apiApp: FastifyInstance | undefined
  let events: EventDelivery | undefined
  let ssfReceivers: SsfReceivers | undefined
  let transmitter: Transmitter | undefined
  let retention: { close(): Promise<void> } | undefined
  let metricsListener: MetricsListener | undefined
  let adminListener: { url: string; close(): Promise<void> } | undefined
  let decisionApp: DecisionServer | undefined
  let decisionUrl: string | undefined
  let opened: OpenedGate | undefined
  try {
    const devSeed = options.worker ? undefined : await migrateAndSeed(config, store, clock)
    const tls = await tlsFor(config)
    // Loaded only when on: with tracing off nothing of it is loaded or wrapped.
    const tracing = config.tracing.enabled
      ? (await import('./auth/tracing.ts')).createTracing(
          store.kind === 'postgres' ? 'postgresql' : 'sqlite',
        )
      : undefined
    const auth = await createAuthContext(config, store, clock, logger, {
      auditSpoolDir: join(config.dataDir, 'audit-spool'),
      tracing,
      dataDir: config.dataDir,
    })
    closeAuth = () => auth.close()
    events = startEventDelivery(config.events, store, clock, logger)
    retention = startRetention(store, config, clock, logger)
    const metricsModule = config.metrics.enabled ? await import('./server/metrics.ts') : undefined
    const metrics = metricsModule
      ? metricsModule.createMetrics({
          clock,
          lookupCache: auth.lookups,
          audit: auth.audit,
          jwks: auth.issuers,
          outbox: events.worker ? () => store.outboxStats() : undefined,
          webhook: events.worker,
          changeFeed: () => store.changeFeed,
          storeWrites: () => auth.writes.state(),
        })
      : undefined
    // The identity-token keys also sign the CAEP transmitter's SETs (docs/caep-transmitter.md).
    const signer = await identitySignerFor(config, clock)
    const identityToken = config.identityToken.enabled ? signer : undefined
    transmitter = await startTransmitter({
      transmitter: config.ssf.transmitter,
      events: config.events,
      store,
      signer,
      clock,
      log: logger,
    })
    // One gate for every listener: one limiter, one counter store, one outcome recorder.
    opened = await openGate(auth, {
      rateLimit: config.rateLimit,
      quota: config.quota,
      usage: config.usage,
      redisUrl: config.redisUrl,
      log: logger,
      metrics,
      identityToken,
      tracing,
      usageJournalDir: join(config.dataDir, 'usage-journal'),
    })
    const gate = opened
    const gateway = config.gateway
    // `gateway.policyStore`: the gateway and the decision API follow the stored policy.
    const policyStore = gateway?.policyStore ? store : undefined
    // Imported only in gateway mode: a server without an upstream never loads the proxy.
    const mountGateway = gateway
      ? async (app: FastifyInstance) =>
          (await import('./gateway/register.ts')).registerGateway(app, {
            gateway,
            reservedNames: v1Routes.map((route) => route.path.split('/')[1] ?? ''),
            policyStore,
            traceUpstream: tracing?.upstream,
          })
      : undefined
    const throttle = opened.addressThrottle
    const mountLeakReports = await leakReportsFor(config, store, clock, throttle)
    ssfReceivers = await ssfReceiversFor(config, store, clock, logger, throttle, metrics)
    const fitted = fitToDescriptorLimit(config, logger)
    // Descriptors are the process's: every listener's sockets count against the same caps.
    const connections = createConnectionBudget(fitted.server)
    const app = await buildServer({
      config: fitted,
      auth,
      logger,
      tls,
      metrics,
      gate,
      mounts: [mountLeakReports, ssfReceivers?.mount, mountGateway].filter(
        (mount) => mount !== undefined,
      ),
      ssfReadiness: receiversHealth(ssfReceivers),
      connections,
    })
    apiApp = app
    if (signer) {
      // Public keys of the identity token and the SETs, on the API listener only (see
      // decision/server.ts).
      app.get(JWKS_PATH, (_request, reply) => {
        reply.header('cache-control', 'public, max-age=300').send(signer.jwks())
      })
    }
    const ssfTransmitter = config.ssf.transmitter
    if (ssfTransmitter) {
      const metadata = ssfConfiguration(ssfTransmitter)
      app.get(SSF_CONFIGURATION_PATH, (_request, reply) => {
        reply.header('cache-control', 'public, max-age=300').send(metadata)
      })
    }
    await listenAs('api', () =>
      app.listen({
        host: config.server.host,
        port: config.server.port,
        // Fastify cannot tell that our own serverFactory made an HTTPS server.
        listenTextResolver: (address) =>
          listeningLine('api', tls ? address.replace(/^http:/, 'https:') : address),
      }),
    )
    const address = app.server.address() as AddressInfo
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address
    const url = `${tls ? 'https' : 'http'}://${host}:${address.port}`
    // Streams are set up (and polled) once the push endpoint can answer.
    ssfReceivers?.start()
    const receivers = ssfReceivers
    if (metrics && options.worker) {
      const { AggregatorRegistry } = await import('prom-client')
      AggregatorRegistry.setRegistries([metrics.registry])
      // Constructing one is what makes a worker answer the primary's scrape requests.
      new AggregatorRegistry()
    } else if (metrics && metricsModule) {
      const started = await listenAs('metrics', () =>
        metricsModule.startMetricsListener(
          metrics,
          config.metrics.host,
          config.metrics.port,
          connections,
        ),
      )
      metricsListener = started
      logger.info({ listener: 'metrics' }, listeningLine('metrics', new URL(started.url).origin))
    }
    if (config.admin.enabled) {
      const { startAdminListener } = await import('./admin/server.ts')
      adminListener = await listenAs('admin', () =>
        startAdminListener(
          {
            config,
            store,
            issuers: auth.issuers,
            clock,
            logger,
            tls,
            changeFeed: () => store.changeFeed,
            jwtRevocations: auth.revocations,
          },
          (url) => listeningLine('admin', url),
          connections,
        ),
      )
    }
    const decision = config.decision
    if (decision) {
      const { buildDecisionServer } = await import('./decision/server.ts')
      const built = await buildDecisionServer({
        config,
        gate,
        logger,
        policyStore,
        connections,
        changes: {
          readAsOf: propertyReader(store, 'changesReadAsOf'),
          catchUp: () => void store.catchUpChanges?.(),
          settled: () => auth.changesSettled(),
        },
      })
      decisionApp = built
      const name = decision.socket ? 'decisionSocket' : 'decision'
      decisionUrl = await listenAs(name, () => built.listen(decision.host, decision.port))
      logger.info({ listener: 'decision' }, listeningLine('decision', decisionUrl))
      if (built.grpcUrl) {
        logger.info({ listener: 'decisionGrpc' }, listeningLine('decisionGrpc', built.grpcUrl))
      }
    }
    const started = { events, transmitter, retention, metricsListener, decisionApp, adminListener }

    let closing: Promise<void> | undefined
    return {
      url,
      devSeed,
      logger,
      metricsUrl: metricsListener?.url,
      adminUrl: adminListener?.url,
      decisionUrl,
      decisionGrpcUrl: decisionApp?.grpcUrl,
      get changeFeed() {
        return store.changeFeed
      },
      close() {
        closing ??= (async () => {
          const force = setTimeout(
            () => app.server.closeAllConnections(),
            config.server.shutdownTimeoutMs,
          )
          force.unref()
          await app.close()
          await receivers?.close()
          await started.adminListener?.close()
          await started.decisionApp?.close()
          await started.metricsListener?.close()
          // Before the audit flush: events flushed now stay queued for the next start.
          await started.events.close()
          await started.transmitter.close()
          await started.retention.close()
          clearTimeout(force)
          await gate.close()
          await auth.close()
          await store.close()
        })()
        return closing
      },
    }
  } catch (error) {
    await adminListener?.close()
    await decisionApp?.close()
    await metricsListener?.close()
    await apiApp?.close()
    // The log's last word on this start: a "listening on" line above no longer holds.
    logger.error(
      { reason: (error as Error).message },
      'start failed: every listener that had started is closed again',
    )
    await opened?.close()
    await ssfReceivers?.close()
    await events?.close()
    await transmitter?.close()
    await retention?.close()
    await closeAuth?.()
    await store.close().catch(() => {})
    throw error
  }
}

/** The embedded file, or Postgres (with its LISTEN connection's own URL, when given). */
function storeLocation(config: Readonly<Config>) {
  return config.databaseUrl
    ? { databaseUrl: config.databaseUrl, databaseListenUrl: config.databaseListenUrl }
    : { dataDir: config.dataDir }
}

/** GitHub's leak reports on the API listener, when their keys file is configured. */
async function leakReportsFor(
  config: Readonly<Config>,
  store: Store,
  clock: Clock,
  throttle: AddressThrottle,
) {
  const file = config.leakReports.githubKeysFile
  if (file === undefined) return undefined
  const { readFile } = await import('node:fs/promises')
  const { createGithubLeakReports, parseGithubKeys } = await import('./auth/leak-reports.ts')
  const { leakReportRoutes } = await import('./server/leak-reports.ts')
  const source = `leakReports.githubKeysFile ${file}`
  const text = await readFile(file, 'utf8').catch((error: Error) => {
    throw new Error(`${source}: cannot be read (${error.message})`)
  })
  const reports = createGithubLeakReports({
    keys: parseGithubKeys(text, source),
    maxMatches: config.leakReports.maxMatches,
  })
  return leakReportRoutes({
    reports,
    store,
    clock,
    maxBodyBytes: config.leakReports.maxBodyBytes,
    throttle: throttle.endpoint('/leak-reports/github'),
  })
}

/** What `/readyz` lists of the receivers; undefined (no `ssf` check) with none configured. */
function receiversHealth(receivers: SsfReceivers | undefined) {
  return receivers && (() => receivers.receivers.map((receiver) => receiver.health()))
}

/** The CAEP/SSF receivers (`ssf.receivers`), when any is configured. */
async function ssfReceiversFor(
  config: Readonly<Config>,
  store: Store,
  clock: Clock,
  logger: Logger,
  throttle: AddressThrottle,
  metrics: Metrics | undefined,
): Promise<SsfReceivers | undefined> {
  if (config.ssf.receivers.length === 0) return undefined
  const { createSsfReceivers } = await import('./ssf/receiver-setup.ts')
  return createSsfReceivers(config, {
    store,
    clock,
    log: logger,
    throttle: throttle.endpoint('/ssf/events/*'),
    metrics,
  })
}

async function identitySignerFor(config: Readonly<Config>, clock: Clock) {
  if (!config.identityToken.enabled && !config.ssf.transmitter) return undefined
  const { createIdentityTokenSigner } = await import('./auth/identity-token.ts')
  return createIdentityTokenSigner(
    config.identityToken,
    config.identityToken.keysFile ?? join(config.dataDir, 'identity-keys.json'),
    clock,
  )
}

async function tlsFor(config: Readonly<Config>): Promise<TlsMaterial | undefined> {
  if (config.server.plainHttp) return undefined
  const material = await serverTlsFor(config)
  const client = config.server.clientCertificates
  if (client === undefined) return material
  let ca: string
  try {
    ca = readClientCa(client.caFile)
  } catch (error) {
    throw new Error(
      `server.clientCertificates.caFile ${client.caFile} (TOKENGATE_CLIENT_CA_FILE): ${(error as Error).message}`,
      { cause: error },
    )
  }
  return { ...material, clientCertificates: { ca, mode: client.mode } }
}

async function serverTlsFor(config: Readonly<Config>): Promise<TlsMaterial> {
  const { tlsCertFile, tlsKeyFile } = config.server
  if (tlsCertFile && tlsKeyFile) {
    // OpenSSL's own message names neither the file nor the setting.
    try {
      const material = readTlsFiles(tlsCertFile, tlsKeyFile)
      createSecureContext(material)
      return material
    } catch (error) {
      throw new Error(
        `server.tlsCertFile ${tlsCertFile} / server.tlsKeyFile ${tlsKeyFile} (TOKENGATE_TLS_CERT_FILE / TOKENGATE_TLS_KEY_FILE): not a readable PEM certificate and matching private key (${(error as Error).message}); give PEM files`,
        { cause: error },
      )
    }
  }
  return ensureDevCertificate(config.dataDir)
}
