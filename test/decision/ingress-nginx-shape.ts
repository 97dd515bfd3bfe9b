/**
 * The nginx configuration ingress-nginx generates for the Ingress in
 * examples/forward-auth/ingress-nginx.yaml, rendered by hand from the controller's own
 * template so the decision listener is tested behind exactly what a cluster runs:
 *
 * - kubernetes/ingress-nginx @ dbb11b92ddb77bee9c35e462479129354c84f939,
 *   rootfs/etc/nginx/template/nginx.tmpl: the `http` maps (lines 380–397: `$connection_upgrade`,
 *   `$req_id`), `underscores_in_headers`/`ignore_invalid_headers` (302–303), the auth location
 *   `location = {{ $authPath }}` (1006–1127) and the protected location (1150–1345);
 * - internal/ingress/controller/template/template.go: `buildAuthLocation` (556–575, the
 *   `/_external-auth-<base64url(path)>-<pathType>` name) and `buildAuthResponseHeaders`
 *   (599–617: one `auth_request_set $authHeaderN $upstream_http_<name>` and one
 *   `proxy_set_header '<Name>' $authHeaderN` per listed header).
 *
 * Defaults as the controller ships them: no `auth-method` (so no `proxy_method` and no
 * `X-Original-URI` on the auth subrequest), `auth-keepalive` 0 (plain `auth_request`, not the
 * Lua subrequest), `generate-request-id` on, underscores in headers off, invalid headers
 * ignored, proxy buffering off, 4k buffers. What is left out does not touch the auth path:
 * the Lua balancer (replaced by a plain `upstream`), opentelemetry, modsecurity, logging.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'

const EXAMPLE = join(import.meta.dirname, '../../examples/forward-auth/ingress-nginx.yaml')
const PREFIX = 'nginx.ingress.kubernetes.io/'

interface IngressExample {
  readonly authUrl: string
  readonly responseHeaders: readonly string[]
  readonly authMethod: string | undefined
  readonly path: string
}

/** The annotations and path of the shipped example, as the controller reads them. */
export function ingressExample(): IngressExample {
  const doc = parse(readFileSync(EXAMPLE, 'utf8')) as {
    metadata: { annotations: Record<string, string> }
    spec: { rules: { http: { paths: { path: string }[] } }[] }
  }
  const annotations = doc.metadata.annotations
  const authUrl = annotations[`${PREFIX}auth-url`]
  if (!authUrl) throw new Error('ingress-nginx.yaml: no auth-url annotation')
  return {
    authUrl,
    responseHeaders: (annotations[`${PREFIX}auth-response-headers`] ?? '')
      .split(',')
      .map((name) => name.trim())
      .filter(Boolean),
    authMethod: annotations[`${PREFIX}auth-method`],
    path: doc.spec.rules[0]?.http.paths[0]?.path ?? '/',
  }
}

/** The generated `http`-level maps and the server, with the test's ports. */
export function ingressNginxServer(ports: {
  proxy: number
  decision: number
  upstream: number
}): string {
  const example = ingressExample()
  const authUrl = new URL(example.authUrl)
  // The example names the in-cluster Service; the test runs it on 127.0.0.1.
  const target = `http://127.0.0.1:${ports.decision}${authUrl.pathname}${authUrl.search}`
  const authPath = `/_external-auth-${Buffer.from(example.path).toString('base64url')}-Prefix`
  const responseHeaders = example.responseHeaders.flatMap((name, i) => [
    `auth_request_set $authHeader${i} $upstream_http_${name.toLowerCase().replaceAll('-', '_')};`,
    `proxy_set_header '${name}' $authHeader${i};`,
  ])
  const method = example.authMethod
    ? [
        `proxy_method                ${example.authMethod};`,
        'proxy_set_header            X-Original-URI          $request_uri;',
        'proxy_set_header            X-Scheme                $pass_access_scheme;',
      ]
    : []
  return `
underscores_in_headers          off;
ignore_invalid_headers          on;

map $http_upgrade $connection_upgrade {
    default          upgrade;
    ''               '';
}

map $http_x_request_id $req_id {
    default   $http_x_request_id;
    ""        $request_id;
}

upstream upstream_balancer {
    server 127.0.0.1:${ports.upstream};
    keepalive 320;
}

server {
    listen 127.0.0.1:${ports.proxy};

    location = ${authPath} {
        internal;
        access_log off;
        set $proxy_upstream_name "default-orders-3000";

        proxy_intercept_errors      off;
        proxy_pass_request_body     off;
        proxy_set_header            Content-Length          "";
        proxy_set_header            X-Forwarded-Proto       "";
        proxy_set_header            X-Request-ID            $req_id;
        ${method.join('\n        ')}

        proxy_set_header            Host                    ${authUrl.host};
        proxy_set_header            X-Original-URL          $scheme://$http_host$request_uri;
        proxy_set_header            X-Original-Method       $request_method;
        proxy_set_header            X-Sent-From             "nginx-ingress-controller";
        proxy_set_header            X-Real-IP               $remote_addr;
        proxy_set_header            X-Forwarded-For        $remote_addr;
        proxy_set_header            X-Auth-Request-Redirect $request_uri;

        proxy_buffering                         off;
        proxy_buffer_size                       4k;
        proxy_buffers                           4 4k;
        proxy_request_buffering                 on;

        proxy_ssl_server_name       on;
        proxy_pass_request_headers  on;
        client_max_body_size        1m;

        proxy_http_version 1.1;
        set $target "${target}";
        proxy_pass $target;
    }

    location ${example.path} {
        access_log off;
        port_in_redirect off;
        set $proxy_upstream_name "default-orders-3000";
        set $proxy_host          $proxy_upstream_name;
        set $pass_access_scheme  $scheme;
        set $pass_server_port    $server_port;
        set $best_http_host      $http_host;
        set $pass_port           $pass_server_port;
        set $proxy_alternative_upstream_name "";

        # this location requires authentication
        auth_request        ${authPath};
        auth_request_set    $auth_cookie $upstream_http_set_cookie;
        add_header          Set-Cookie $auth_cookie;
        ${responseHeaders.join('\n        ')}

        client_max_body_size                    1m;

        proxy_set_header Host                   $best_http_host;
        proxy_set_header                        Upgrade           $http_upgrade;
        proxy_set_header                        Connection        $connection_upgrade;
        proxy_set_header X-Request-ID           $req_id;
        proxy_set_header X-Real-IP              $remote_addr;
        proxy_set_header X-Forwarded-For        $remote_addr;
        proxy_set_header X-Forwarded-Host       $best_http_host;
        proxy_set_header X-Forwarded-Port       $pass_port;
        proxy_set_header X-Forwarded-Proto      $pass_access_scheme;
        proxy_set_header X-Forwarded-Scheme     $pass_access_scheme;
        proxy_set_header X-Scheme               $pass_access_scheme;
        proxy_set_header X-Original-Forwarded-For  $http_x_forwarded_for;
        proxy_set_header X-Original-Forwarded-Host $http_x_forwarded_host;
        proxy_set_header Proxy                  "";

        proxy_connect_timeout                   5s;
        proxy_send_timeout                      60s;
        proxy_read_timeout                      60s;
        proxy_buffering                         off;
        proxy_buffer_size                       4k;
        proxy_buffers                           4 4k;
        proxy_request_buffering                 on;
        proxy_http_version                      1.1;
        proxy_cookie_domain                     off;
        proxy_cookie_path                       off;
        proxy_next_upstream                     error timeout;
        proxy_next_upstream_timeout             0;
        proxy_next_upstream_tries               3;

        proxy_pass http://upstream_balancer;
    }
}
`
}
