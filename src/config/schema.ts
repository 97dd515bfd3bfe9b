import { type Static, Type } from './json-schema.ts'

/**
 * The one configuration schema. Every field has a default or is optional, and a description
 * (docs/configuration.md is generated from these). Sources, lowest to highest precedence:
 * defaults < config file (JSON or YAML) < environment (`TOKENGATE_*`, `DATABASE_URL`,
 * `REDIS_URL`) < command-line flags. See `load.ts`.
 */
/** The proxies the forward-auth decision API knows, each with its one header family. */
export const PROXY_KINDS = ['nginx', 'ingress-nginx', 'caddy', 'traefik', 'envoy'] as const
export type ProxyKind = (typeof PROXY_KINDS)[number]

/** One CAEP/SSF receiver (ssf/receiver.ts). */
const SSF_RECEIVER = Type.Object(
  {
    name: Type.String({
      pattern: '^[a-z0-9][a-z0-9-]{0,62}$',
      description: 'Names the receiver: its push path /ssf/events/<name>, audit events and logs.',
    }),
    transmitter: Type.String({
      pattern: '^https?://[^?#]+$',
      description:
        "The transmitter's issuer (the SETs' iss, exactly); its SSF configuration is read from <transmitter>/.well-known/ssf-configuration and its keys from the jwks_uri there (on its origin, or one in origins). https (http on loopback only).",
    }),
    jwtIssuer: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "The trusted JWT issuer (tokengate issuer list) whose tokens the events revoke; default the transmitter. Okta: the authorization server's issuer (https://acme.okta.com/oauth2/default).",
      }),
    ),
    audience: Type.String({
      minLength: 1,
      description: 'Our audience: every SET must name it in aud.',
    }),
    delivery: Type.Optional(
      Type.Union([Type.Literal('push'), Type.Literal('poll')], {
        description:
          'push (RFC 8935: the transmitter POSTs each SET to pushUrl; the default) or poll (RFC 8936: each instance polls the stream; duplicates are refused by jti).',
      }),
    ),
    pushUrl: Type.Optional(
      Type.String({
        pattern: '^https?://',
        description:
          'push: our endpoint as the transmitter reaches it (https://api.example.com/ssf/events/<name>), sent when tokengate creates the stream.',
      }),
    ),
    streamId: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "Adopt this existing stream; unset: use the receiver's stream with the same delivery, or create one.",
      }),
    ),
    bearerTokenFile: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          "A file holding the bearer token for the transmitter's stream management and poll endpoints; read at start, never logged.",
      }),
    ),
    pushAuthorizationFile: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'A file holding the exact Authorization header value the transmitter sends with each push (configured at the transmitter); a push without it is 401 authentication_failed.',
      }),
    ),
    origins: Type.Optional(
      Type.Array(Type.String({ pattern: '^https?://[^/\\s,]+$' }), {
        description:
          "Origins besides the transmitter's own that its jwks_uri and endpoints may be on. Default none: anything elsewhere is refused.",
      }),
    ),
    algorithms: Type.Optional(
      Type.Array(Type.String({ minLength: 1 }), {
        description:
          'Signature algorithms accepted on SETs; default RS256, PS256, ES256, EdDSA (none is never accepted).',
      }),
    ),
    pollIntervalMs: Type.Optional(
      Type.Integer({
        minimum: 50,
        description:
          'poll: time between two polls when the last one returned nothing. Default 1000.',
      }),
    ),
    maxEvents: Type.Optional(
      Type.Integer({
        minimum: 1,
        maximum: 1_000,
        description: 'poll: most SETs asked for per poll. Default 100.',
      }),
    ),
    maxSetAgeSec: Type.Optional(
      Type.Integer({
        minimum: 60,
        description:
          'A SET issued (iat) longer ago is refused; SET ids are kept this long for the replay check. Default 86400.',
      }),
    ),
    timeoutMs: Type.Optional(
      Type.Integer({
        minimum: 1,
        description: 'Timeout of each request to the transmitter. Default 5000.',
      }),
    ),
  },
  { additionalProperties: false },
)

export const ConfigSchema = Type.Object(
  {
    dataDir: Type.String({
      default: '.tokengate',
      minLength: 1,
      description: 'Directory for the SQLite database, TLS material and dev keys (mode 0700).',
    }),
    dev: Type.Boolean({
      default: false,
      description:
        'Dev mode: seeds a demo tenant, PAT and local JWT issuer, and a self-signed certificate.',
    }),
    databaseUrl: Type.Optional(
      Type.String({
        pattern: '^postgres(ql)?://',
        description: 'Postgres URL for scale-out; when unset the embedded SQLite store is used.',
      }),
    ),
    databaseListenUrl: Type.Optional(
      Type.String({
        pattern: '^postgres(ql)?://',
        description:
          'Postgres URL for the one LISTEN connection per instance (change wake-ups); default databaseUrl. Behind PgBouncer in transaction pooling LISTEN never delivers: point this at Postgres itself or a session-mode pool (without it changes still arrive within store.changePollMs).',
      }),
    ),
    store: Type.Object(
      {
        changePollMs: Type.Integer({
          default: 500,
          minimum: 10,
          maximum: 60_000,
          description:
            'How often each instance reads the change log (revocations, tenant, issuer and policy changes) without waiting for a wake-up: the bound on how late a change from another process is applied when NOTIFY does not arrive.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    secretKeyFile: Type.Optional(
      Type.String({
        minLength: 1,
        description:
          'File holding the 32-byte key (base64 or hex, e.g. `openssl rand -base64 32`) that seals issuer shared secrets in the store (AES-256-GCM). Default: the embedded store generates `<dataDir>/secret.key` (0600), a dev convenience; Postgres has none, and then HS* issuers cannot be stored.',
      }),
    ),
    redisUrl: Type.Optional(
      Type.String({
        pattern: '^rediss?(-sentinel|-cluster)?://',
        description:
          'Redis for rate-limit counters shared across instances: `redis://[:PASSWORD@]HOST:PORT[/DB]` (one server; `rediss://` for TLS), `redis-sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB][?sentinelPassword=...]` (Sentinel: the master is looked up and followed across failovers), or `redis-cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]` (Cluster seed nodes). See docs/scale-out.md for what a failover loses.',
      }),
    ),
    server: Type.Object(
      {
        host: Type.String({ default: '127.0.0.1', description: 'Address to listen on.' }),
        port: Type.Integer({ default: 8443, minimum: 0, maximum: 65535, description: 'TCP port.' }),
        plainHttp: Type.Boolean({
          default: false,
          description:
            'Serve plain HTTP instead of HTTPS. Only for running behind a TLS-terminating proxy.',
        }),
        tlsCertFile: Type.Optional(
          Type.String({
            description: 'PEM certificate chain. Required with tlsKeyFile outside dev.',
          }),
        ),
        tlsKeyFile: Type.Optional(Type.String({ description: 'PEM private key.' })),
        clientCertificates: Type.Optional(
          Type.Object(
            {
              caFile: Type.String({
                minLength: 1,
                description:
                  'PEM bundle of the CAs whose client certificates the HTTPS listener accepts. Only a certificate that verifies against it counts for certificate-bound tokens (docs/certificate-binding.md).',
              }),
              mode: Type.Union([Type.Literal('optional'), Type.Literal('required')], {
                default: 'optional',
                description:
                  '`optional`: the listener asks for a client certificate and serves clients without one (an unverified one is ignored); `required`: a TLS handshake without a certificate the CA signed fails.',
              }),
            },
            {
              additionalProperties: false,
              description:
                'Request client certificates (mutual TLS) in server and gateway mode, for certificate-bound PATs and JWTs (RFC 8705). Off unless set.',
            },
          ),
        ),
        trustProxy: Type.Boolean({
          default: false,
          description: 'Trust X-Forwarded-For for the client address (behind a proxy only).',
        }),
        bodyLimitBytes: Type.Integer({
          default: 1_048_576,
          minimum: 1,
          description: 'Largest accepted request body for built-in routes.',
        }),
        maxHeaderBytes: Type.Integer({
          default: 16_384,
          minimum: 1024,
          description: 'Largest accepted request head (all headers), enforced by Node.',
        }),
        requestTimeoutMs: Type.Integer({
          default: 30_000,
          minimum: 1,
          description: 'Time allowed to receive a whole request.',
        }),
        hstsMaxAgeSec: Type.Integer({
          default: 31_536_000,
          minimum: 0,
          description: 'Strict-Transport-Security max-age on HTTPS responses; 0 disables it.',
        }),
        shutdownTimeoutMs: Type.Integer({
          default: 10_000,
          minimum: 0,
          description: 'Graceful shutdown: time in-flight requests get before sockets are closed.',
        }),
        workers: Type.Union([Type.Integer({ minimum: 1, maximum: 1024 }), Type.Literal('auto')], {
          default: 1,
          description:
            'Worker processes sharing the listener (node:cluster); `auto` = one per CPU. 1 keeps one process (dev, containers sized to one CPU); use `auto` on a multi-core host. Without redisUrl each worker enforces 1/N of every rate limit (docs/scale-out.md).',
        }),
        firstByteTimeoutMs: Type.Integer({
          default: 10_000,
          minimum: 1,
          description:
            'Time a new connection gets to complete the TLS handshake and then to send its first request head; idle sockets are closed after it.',
        }),
        maxConnections: Type.Integer({
          default: 4096,
          minimum: 0,
          description: 'Open client connections at most; beyond it new ones are closed. 0: no cap.',
        }),
        maxConnectionsPerAddress: Type.Integer({
          default: 256,
          minimum: 0,
          description:
            'Open connections per client address (IPv6: per /64) at most; beyond it new ones from that address are closed. 0: no cap (e.g. behind one proxy).',
        }),
        cors: Type.Object(
          {
            origins: Type.Array(Type.String({ pattern: '^https?://[^/\\s,]+$' }), {
              default: [],
              description:
                'Browser origins (scheme://host[:port], exact) allowed to call /api/v1 cross-origin. Empty: CORS off.',
            }),
            maxAgeSec: Type.Integer({
              default: 600,
              minimum: 0,
              description:
                'How long a browser may cache a preflight answer (Access-Control-Max-Age).',
            }),
          },
          { default: {}, additionalProperties: false },
        ),
      },
      { default: {}, additionalProperties: false },
    ),
    log: Type.Object(
      {
        level: Type.Union(
          [
            Type.Literal('fatal'),
            Type.Literal('error'),
            Type.Literal('warn'),
            Type.Literal('info'),
            Type.Literal('debug'),
            Type.Literal('trace'),
            Type.Literal('silent'),
          ],
          { default: 'info', description: 'pino log level.' },
        ),
      },
      { default: {}, additionalProperties: false },
    ),
    auth: Type.Object(
      {
        clockToleranceSec: Type.Integer({
          default: 30,
          minimum: 0,
          maximum: 300,
          description: 'Clock skew allowed on JWT exp/nbf/iat.',
        }),
        maxJwtLifetimeSec: Type.Integer({
          default: 86_400,
          minimum: 1,
          description: 'Longest accepted JWT lifetime (exp - iat, or exp - now without iat).',
        }),
        jwtCacheMaxEntries: Type.Integer({
          default: 10_000,
          minimum: 0,
          description: 'Verified-JWT cache size (never serves a token past its exp).',
        }),
        jwksTimeoutMs: Type.Integer({
          default: 5_000,
          minimum: 1,
          description: 'JWKS fetch timeout.',
        }),
        jwksCooldownMs: Type.Integer({
          default: 30_000,
          minimum: 0,
          description: 'Minimum time between JWKS refetches triggered by an unknown kid.',
        }),
        jwksCacheMaxAgeMs: Type.Integer({
          default: 600_000,
          minimum: 1,
          description: 'JWKS refresh interval.',
        }),
        jwksStaleMaxMs: Type.Integer({
          default: 3_600_000,
          minimum: 0,
          description: 'How long cached keys keep verifying while the JWKS URL is failing.',
        }),
        lookupCacheTtlMs: Type.Integer({
          default: 2_000,
          minimum: 0,
          description:
            'In-process PAT/tenant cache TTL; bounds how long a revoke made by another process takes to apply without notifications.',
        }),
        tenantStaleIfErrorMs: Type.Integer({
          default: 3_600_000,
          minimum: 0,
          description:
            'While the store is unreachable, a tenant read within this window is still trusted, so JWT callers keep working; PATs always fail closed (503).',
        }),
        lookupCacheMaxEntries: Type.Integer({
          default: 100_000,
          minimum: 0,
          description: 'In-process PAT/tenant cache size.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    pat: Type.Object(
      {
        defaultExpiresInDays: Type.Integer({
          default: 90,
          minimum: 1,
          description: 'Expiry of a PAT issued without --expires-in.',
        }),
        maxExpiresInDays: Type.Integer({
          default: 0,
          minimum: 0,
          description:
            'Operator policy: longest PAT lifetime allowed; 0 = no maximum (never allowed).',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    rateLimit: Type.Object(
      {
        enabled: Type.Boolean({
          default: true,
          description:
            'Rate limiting on /api/v1 (per token, per tenant, failed authentications per address).',
        }),
        perToken: rateLimitPolicy(
          1_200,
          'Requests per token per window: a PAT by its id, a JWT by issuer, tenant and subject (so a refreshed JWT shares its allowance). 0 disables.',
        ),
        perTenant: rateLimitPolicy(
          12_000,
          'Requests per tenant per window, across all its tokens. 0 disables.',
        ),
        failedAuth: rateLimitPolicy(
          60,
          'Failed authentications (401) per client address (IPv6: per /64) per window; beyond it, unauthenticated attempts from that address get 429 without verification. 0 disables.',
        ),
        localMaxKeys: Type.Integer({
          default: 100_000,
          minimum: 100,
          description:
            'In-process counters kept per policy (least recently used dropped first); used without Redis or while Redis is down.',
        }),
        redisPrefix: Type.String({
          default: 'tokengate:rl:',
          description: 'Prefix of the counter keys in Redis (redisUrl).',
        }),
        redisTimeoutMs: Type.Integer({
          default: 250,
          minimum: 1,
          description:
            'Redis command timeout; on timeout or error the request is counted in-process instead (never a 5xx).',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    quota: Type.Object(
      {
        maxBlock: Type.Integer({
          default: 1_000,
          minimum: 1,
          maximum: 100_000,
          description:
            "Most uses of a key's quota one instance (or worker) reserves from the store at once: blocks grow from 4 while a key is busy, up to ceil(limit / 100) and at most this. A quota is never exceeded; uses reserved and not spent (at most a block less one per instance, so 1 % of the limit) are unavailable to other instances until given back at shutdown (docs/limits.md).",
        }),
        recheckMs: Type.Integer({
          default: 5_000,
          minimum: 100,
          maximum: 60_000,
          description:
            "How long an instance believes a key's quota exhausted before asking the store again (an edit or reset of the quota applies at once).",
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    usage: Type.Object(
      {
        enabled: Type.Boolean({
          default: true,
          description:
            'Count requests by outcome (allowed, 401, 403, 429) per key, per tenant and in all, in minute, hour and day buckets in the store (cluster-wide; the console charts and the admin API read them).',
        }),
        flushIntervalMs: Type.Integer({
          default: 5_000,
          minimum: 100,
          maximum: 60_000,
          description:
            'How often each instance adds its counts to the store (write-behind; a graceful shutdown writes what is left).',
        }),
        maxKeysPerMinute: Type.Integer({
          default: 100_000,
          minimum: 100,
          description:
            'Distinct keys and tenants counted per minute in memory; beyond it only the totals are counted (and the overflow is logged).',
        }),
        minuteRetentionHours: Type.Integer({
          default: 48,
          minimum: 1,
          maximum: 744,
          description: 'How long minute buckets are kept.',
        }),
        hourRetentionDays: Type.Integer({
          default: 31,
          minimum: 1,
          maximum: 3_660,
          description: 'How long hour buckets are kept.',
        }),
        dayRetentionDays: Type.Integer({
          default: 400,
          minimum: 1,
          maximum: 36_600,
          description: 'How long day buckets are kept.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    audit: Type.Object(
      {
        retentionDays: Type.Integer({
          default: 0,
          minimum: 0,
          maximum: 36_600,
          description:
            'Delete audit events older than this many days (hourly, in batches; events still waiting for webhook delivery are kept). 0: keep them forever.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    leakReports: Type.Object(
      {
        githubKeysFile: Type.Optional(
          Type.String({
            minLength: 1,
            description:
              "GitHub's secret scanning public keys (the JSON of https://api.github.com/meta/public_keys/secret_scanning, saved by the operator; never fetched at run time). Set: POST /leak-reports/github on the API listener takes GitHub's signed reports and revokes reported PATs (docs/leak-reports.md).",
          }),
        ),
        maxBodyBytes: Type.Integer({
          default: 1_048_576,
          minimum: 1_024,
          description: 'Largest leak report accepted.',
        }),
        maxMatches: Type.Integer({
          default: 1_000,
          minimum: 1,
          description: 'Most reported tokens in one leak report.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    events: Type.Object(
      {
        webhookUrl: Type.Optional(
          Type.String({
            pattern: '^https?://',
            description:
              'Deliver every audit event to this URL (POST, JSON, signed; see docs/events.md). Unset: no delivery. Prefer https://.',
          }),
        ),
        webhookSecret: Type.Optional(
          Type.String({
            minLength: 16,
            description:
              'HMAC-SHA256 key for X-Tokengate-Signature; required with webhookUrl. Set it through TOKENGATE_EVENTS_WEBHOOK_SECRET rather than a file.',
          }),
        ),
        timeoutMs: Type.Integer({
          default: 5_000,
          minimum: 1,
          description: 'Webhook request timeout; a receiver that hangs fails the attempt.',
        }),
        batchSize: Type.Integer({
          default: 100,
          minimum: 1,
          maximum: 1_000,
          description: 'Events per webhook request.',
        }),
        pollIntervalMs: Type.Integer({
          default: 1_000,
          minimum: 10,
          description: 'How often the outbox is checked for new events while it is empty.',
        }),
        retryInitialMs: Type.Integer({
          default: 1_000,
          minimum: 1,
          description: 'First retry delay after a failed delivery; doubles per failure (jittered).',
        }),
        retryMaxMs: Type.Integer({
          default: 300_000,
          minimum: 1,
          description: 'Longest retry delay. Events are retried until delivered, never dropped.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    ssf: Type.Object(
      {
        transmitter: Type.Optional(
          Type.Object(
            {
              issuer: Type.String({
                pattern: '^https?://[^/]+$',
                description:
                  'iss of the CAEP credential-change SETs sent for our own keys, and the origin receivers find /.well-known/ssf-configuration and /.well-known/jwks.json at (the API listener as receivers reach it, e.g. https://api.example.com). See docs/caep-transmitter.md.',
              }),
              receivers: Type.Array(
                Type.Object(
                  {
                    url: Type.String({
                      pattern: '^https?://',
                      description:
                        'The receiver push endpoint (RFC 8935): one SET per POST, through the event outbox (retried until delivered). Prefer https://.',
                    }),
                    audience: Type.String({
                      minLength: 1,
                      description: 'aud of the SETs sent to this receiver (its SSF audience).',
                    }),
                    authorizationHeaderFile: Type.Optional(
                      Type.String({
                        description:
                          'A file holding the Authorization header value the receiver expects (SSF delivery authorization_header, e.g. "Bearer ..."); read at start.',
                      }),
                    ),
                  },
                  { additionalProperties: false },
                ),
                {
                  default: [],
                  description:
                    'Receivers subscribed to credential-change SETs: a PAT revoked, leaked, disabled or enabled, or its permissions changed. SETs are signed with the identity-token keys (identityToken.keysFile, rotated and published the same way).',
                },
              ),
            },
            { additionalProperties: false },
          ),
        ),
        receivers: Type.Array(SSF_RECEIVER, {
          default: [],
          description:
            'CAEP/SSF receivers, one per transmitter (an IdP): its session-revoked, credential-change and token-claims-change SETs become JWT revocation rules (docs/revoking-jwts.md#caep). Push SETs arrive at POST /ssf/events/<name> on the API listener.',
        }),
        maxPushBytes: Type.Integer({
          default: 65_536,
          minimum: 1_024,
          maximum: 1_048_576,
          description: 'Largest pushed SET accepted (413 above it); a SET is a few hundred bytes.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    metrics: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'Serve Prometheus metrics at /metrics on a separate listener (never on the API port).',
        }),
        host: Type.String({
          default: '127.0.0.1',
          description:
            'Metrics listener address. It has no authentication: keep it on loopback or a private network.',
        }),
        port: Type.Integer({
          default: 9464,
          minimum: 0,
          maximum: 65535,
          description: 'Metrics listener port (plain HTTP).',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    tracing: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'OpenTelemetry spans (authenticate, store lookups, JWKS fetches, the upstream call, the decision) through @opentelemetry/api, which must be installed; the operator registers an SDK and exporter (docs/tracing.md). Off: nothing of it is loaded or wrapped.',
        }),
      },
      { default: {}, additionalProperties: false },
    ),
    admin: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'Serve the admin API (/admin/api/v1) and web console (/admin/) on a listener of their own (never on the API port). See docs/console.md.',
        }),
        host: Type.String({
          default: '127.0.0.1',
          description: 'Admin listener address. Keep it on loopback or a private network.',
        }),
        port: Type.Integer({
          default: 9443,
          minimum: 0,
          maximum: 65535,
          description:
            'Admin listener port. HTTPS with the server certificate unless server.plainHttp.',
        }),
        sessionTtlMs: Type.Integer({
          default: 28_800_000,
          minimum: 60_000,
          description:
            'Console session lifetime (never beyond the admin token or operator JWT expiry).',
        }),
        sessionIdleMs: Type.Integer({
          default: 1_800_000,
          minimum: 60_000,
          description: 'A console session unused for this long ends.',
        }),
        oidc: Type.Optional(
          Type.Object(
            {
              issuer: Type.String({
                pattern: '^https?://',
                description: 'Operator SSO: exact `iss` of operator JWTs.',
              }),
              audience: Type.String({
                minLength: 1,
                description: 'Operator SSO: required `aud` of operator JWTs.',
              }),
              jwksUrl: Type.Optional(
                Type.String({
                  pattern: '^https?://',
                  description:
                    'Operator SSO: JWKS URL; unset = OpenID Connect discovery from the issuer.',
                }),
              ),
              roleClaim: Type.String({
                default: 'tokengate_admin_roles',
                description:
                  'Operator SSO: claim (array of strings) holding `operator` or `read-only`.',
              }),
              clientId: Type.Optional(
                Type.String({
                  minLength: 1,
                  description:
                    "Operator SSO: the console's client id at the issuer; set, the sign-in page offers sign-in by redirect (authorization code with PKCE), and ID tokens must name it in `aud`.",
                }),
              ),
              clientSecret: Type.Optional(
                Type.String({
                  minLength: 1,
                  description:
                    'Operator SSO: the client secret (sent with HTTP Basic to the token endpoint); unset = a public client (PKCE only).',
                }),
              ),
              redirectUrl: Type.Optional(
                Type.String({
                  pattern: '^https://',
                  description:
                    'Operator SSO: the callback URL registered at the issuer; unset = `https://<the Host the browser used>/admin/sso/callback`.',
                }),
              ),
              scopes: Type.Array(Type.String({ pattern: '^[!#-\\[\\]-~]+$' }), {
                default: ['openid'],
                description:
                  'Operator SSO: scopes asked for at sign-in by redirect (`openid` is always sent); add the one that releases the role claim if the issuer needs it.',
              }),
            },
            { additionalProperties: false },
          ),
        ),
      },
      { default: {}, additionalProperties: false },
    ),
    pagination: Type.Object(
      {
        defaultLimit: Type.Integer({ default: 50, minimum: 1, description: 'Default page size.' }),
        maxLimit: Type.Integer({ default: 200, minimum: 1, description: 'Largest page size.' }),
      },
      { default: {}, additionalProperties: false },
    ),
    gateway: Type.Optional(
      Type.Object(
        {
          upstream: Type.String({
            pattern: '^https?://',
            description: 'Upstream service URL that non-built-in /api/v1 requests are proxied to.',
          }),
          policyFile: Type.Optional(
            Type.String({ description: 'Route permission policy (YAML or JSON).' }),
          ),
          policyStore: Type.Boolean({
            default: false,
            description:
              'Read the route policy from the store instead of policyFile (`tokengate policy set FILE` or `apply`): written once, every instance applies it within store.changePollMs (sooner with LISTEN). The decision API uses it too unless decision.policyFile is set.',
          }),
          timeoutMs: Type.Integer({
            default: 30_000,
            minimum: 1,
            description: 'Upstream response timeout (504 after it).',
          }),
          stripAuthorization: Type.Boolean({
            default: true,
            description: 'Remove the caller Authorization header before proxying.',
          }),
          forwardHeaders: Type.Array(Type.String({ pattern: '^[a-z0-9-]+$' }), {
            default: [],
            description:
              'Forwarding/override headers (lower-case, e.g. cf-connecting-ip) let through from the caller as spelled; all others are dropped. X-Auth-* never passes.',
          }),
          forwardedHost: Type.Boolean({
            default: false,
            description:
              'Send X-Forwarded-Host with the Host the caller addressed (off: not sent).',
          }),
          connections: Type.Integer({
            default: 128,
            minimum: 1,
            description:
              'Upstream connections (the pool size): requests in flight to the upstream.',
          }),
          maxInFlightPerTenant: Type.Integer({
            default: 32,
            minimum: 1,
            description: 'Requests one tenant may have in flight to the upstream; beyond it 429.',
          }),
          maxInFlightPerToken: Type.Integer({
            default: 16,
            minimum: 1,
            description: 'Requests one token may have in flight to the upstream; beyond it 429.',
          }),
          connectionWaitMs: Type.Integer({
            default: 2000,
            minimum: 1,
            description: 'Longest wait for a free upstream connection; 503 after it.',
          }),
          bodyTimeoutMs: Type.Integer({
            default: 10_000,
            minimum: 1,
            description:
              'Longest gap between two chunks of a proxied request body, and the grace before minUploadBytesPerSec applies; 408 after it.',
          }),
          minUploadBytesPerSec: Type.Integer({
            default: 1024,
            minimum: 0,
            description:
              'Slowest average upload rate of a proxied request body after bodyTimeoutMs (0: no minimum); 408 below it.',
          }),
        },
        { additionalProperties: false },
      ),
    ),
    decision: Type.Optional(
      Type.Object(
        {
          host: Type.String({
            default: '127.0.0.1',
            description:
              'Address of the forward-auth decision listener (docs/forward-auth.md). Plain HTTP: keep it on loopback or a private network next to the proxy.',
          }),
          port: Type.Integer({
            default: 8081,
            minimum: 0,
            maximum: 65535,
            description: 'Port of the forward-auth decision listener.',
          }),
          proxy: Type.Optional(
            Type.Union(
              PROXY_KINDS.map((kind) => Type.Literal(kind)),
              {
                description:
                  'The proxy that asks: the one header family believed from trustedProxies (nginx: X-Original-Method/-URI; ingress-nginx: X-Original-Method/-URL; caddy, traefik: X-Forwarded-Method/-Uri; envoy: the request line). Required unless every trustedProxies entry names its own.',
              },
            ),
          ),
          trustedProxies: Type.Array(Type.String({ minLength: 1 }), {
            default: ['127.0.0.1', '::1'],
            description:
              'Addresses or CIDR blocks of the proxies whose statement of the original request and client address is believed, each optionally followed by =<proxy> (e.g. 10.0.0.0/8=ingress-nginx) to override decision.proxy; other callers are decided on their own request line.',
          }),
          pathPrefix: Type.String({
            default: '',
            pattern: '^(/[^/?#]+)*$',
            description:
              'Prefix removed from the request path before deciding (Envoy ext_authz path_prefix), e.g. /ext-authz.',
          }),
          policyFile: Type.Optional(
            Type.String({
              description:
                'Route permission policy (the gateway format, docs/gateway.md); default gateway.policyFile, else authentication only.',
            }),
          ),
          socket: Type.Optional(
            Type.Object(
              {
                path: Type.String({
                  minLength: 1,
                  description:
                    'Absolute path of the Unix socket the decision listener listens on instead of decision.host:decision.port (nginx: server unix:<path> in the decision upstream). Every peer on it is the proxy decision.proxy names: the file mode decides who may connect. A stale socket file is removed at start only when no process listens on it; the file is removed at stop.',
                }),
                mode: Type.String({
                  default: '0660',
                  pattern: '^0?[0-7]{3}$',
                  description:
                    "Octal file mode of the socket: the proxy's worker user needs write permission (0660 with a shared group, 0666 when only the directory guards it).",
                }),
              },
              { additionalProperties: false },
            ),
          ),
          grpcPort: Type.Optional(
            Type.Integer({
              minimum: 0,
              maximum: 65535,
              description:
                'Port of the Envoy gRPC ext_authz service (envoy.service.auth.v3.Authorization/Check, plaintext HTTP/2) on decision.host; unset: none. Answers only trustedProxies entries of kind envoy.',
            }),
          ),
          listeners: Type.Array(
            Type.Object(
              {
                port: Type.Integer({
                  minimum: 0,
                  maximum: 65535,
                  description: 'Port of this decision listener, on decision.host.',
                }),
                proxy: Type.Union(
                  PROXY_KINDS.map((kind) => Type.Literal(kind)),
                  { description: 'The one proxy kind this listener believes.' },
                ),
              },
              { additionalProperties: false },
            ),
            {
              default: [],
              description:
                'More decision listeners, one per further proxy kind, for proxies that share an address (two proxies on one host): each believes only its own proxy header family, from the trustedProxies addresses (their =<proxy> kinds do not apply there). E.g. [{ port: 8082, proxy: caddy }] beside decision.port for nginx.',
            },
          ),
        },
        { additionalProperties: false },
      ),
    ),
    identityToken: Type.Object(
      {
        enabled: Type.Boolean({
          default: false,
          description:
            'Send the caller identity to the upstream as a short-lived JWT signed by tokengate (X-Auth-Token), from the gateway and the decision API.',
        }),
        issuer: Type.String({
          default: 'tokengate',
          minLength: 1,
          description: 'iss claim of identity tokens.',
        }),
        audience: Type.Optional(
          Type.String({
            minLength: 1,
            description:
              "aud claim of every identity token. Default: the upstream's origin (gateway: gateway.upstream; decision API: the scheme and host the client addressed, as the proxy states them).",
          }),
        ),
        ttlSec: Type.Integer({
          default: 60,
          minimum: 5,
          maximum: 3600,
          description: 'Lifetime of an identity token.',
        }),
        algorithm: Type.Union([Type.Literal('ES256'), Type.Literal('EdDSA')], {
          default: 'ES256',
          description: 'Signature algorithm of identity tokens.',
        }),
        rotateAfterSec: Type.Integer({
          default: 86_400,
          minimum: 60,
          description: 'Age after which a new signing key is generated (and published first).',
        }),
        publishAheadSec: Type.Integer({
          default: 900,
          minimum: 0,
          description:
            "A new key is in the JWKS this long before it signs anything: set it above your upstreams' JWKS cache time.",
        }),
        keysFile: Type.Optional(
          Type.String({
            description:
              'Private signing keys (JSON, mode 0600); default <dataDir>/identity-keys.json. Share it between instances.',
          }),
        ),
      },
      { default: {}, additionalProperties: false },
    ),
  },
  { additionalProperties: false },
)

export type Config = Static<typeof ConfigSchema>

/** One rate-limit policy: `max` requests per `windowSec` (fixed window). */
function rateLimitPolicy(max: number, description: string) {
  return Type.Object(
    {
      max: Type.Integer({ default: max, minimum: 0, description }),
      windowSec: Type.Integer({
        default: 60,
        minimum: 1,
        maximum: 86_400,
        description: 'Window length of this policy, in seconds.',
      }),
    },
    { default: {}, additionalProperties: false },
  )
}
