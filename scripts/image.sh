#!/usr/bin/env bash
# `npm run image`: builds the tokengate OCI image with podman from the Containerfile, on a
# local base image, because no image registry is reachable where CI runs:
#   1. localhost/tokengate-base:bookworm-node<V>-r<N>: Debian bookworm's libc6, libstdc++6 and
#      libgcc-s1 (mmdebstrap, from the mirror apt already uses) plus the Node binary of the
#      `node` dev dependency (stripped) at /usr/local/bin/node; made once per Node version.
#   2. localhost/tokengate-build-base:bookworm-node<V>-r<N>-npm<M>: the base plus this machine's
#      npm at the official images' path, for the Containerfile's build stage only.
#   3. npm pack (the build runs in prepack), then podman build of the Containerfile with
#      that tarball as the whole context: localhost/tokengate:<version> and :latest.
# Environment: TOKENGATE_IMAGE (default localhost/tokengate), TOKENGATE_REBUILD_BASE=1 to
# rebuild the bases, DEBIAN_MIRROR (default: the first deb.debian.org-style URI of apt's
# sources). Prints each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."

image="${TOKENGATE_IMAGE:-localhost/tokengate}"
node_bin="$(node_modules/.bin/node -p 'process.execPath')"
node_version="$(node_modules/.bin/node -p 'process.versions.node')"
npm_root="$(npm root -g)"
npm_version="$(node_modules/.bin/node -p "require('$npm_root/npm/package.json').version")"
version="$(node_modules/.bin/node -p "require('./package.json').version")"
# Bump base_revision when the base's recipe below changes, so that cached bases are replaced.
base_revision=2
base="localhost/tokengate-base:bookworm-node${node_version}-r${base_revision}"
build_base="localhost/tokengate-build-base:bookworm-node${node_version}-r${base_revision}-npm${npm_version}"

for tool in podman mmdebstrap; do
  command -v "$tool" >/dev/null || {
    echo "npm run image: $tool is not installed (apt-get install podman runc mmdebstrap uidmap)" >&2
    exit 1
  }
done

# The mirror apt is configured with (deb822 .sources or one-line .list files).
mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local uri
  uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
    sed -nE 's#^URIs:[[:space:]]*(\S+/debian)/?$#\1#p; s#^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?(\S+/debian)/?[[:space:]]+bookworm[[:space:]].*#\2#p' |
    head -n 1)"
  echo "${uri:-http://deb.debian.org/debian}"
}

elapsed() { echo "$(($(date +%s) - $1)) s"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ "${TOKENGATE_REBUILD_BASE:-}" = 1 ] || ! podman image exists "$base"; then
  started=$(date +%s)
  # Only what node links against (ldd: libc, libm, libstdc++, libgcc_s), extracted without a
  # package manager: no shell, apt, dpkg or perl in the runtime image (a minbase root alone
  # is ~130 MB here, and the Node binary ~108 MB).
  rootfs="$work/rootfs"
  mmdebstrap --quiet --variant=extract \
    --include=base-files,base-passwd,netbase,libc6,libgcc-s1,libstdc++6 \
    bookworm "$rootfs" "$(mirror)"
  cp "$rootfs/usr/share/base-passwd/passwd.master" "$rootfs/etc/passwd"
  cp "$rootfs/usr/share/base-passwd/group.master" "$rootfs/etc/group"
  # gconv (8 MB): glibc's iconv modules; Node converts text with ICU and never loads them.
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc \
    "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/usr/share/locale \
    "$rootfs"/usr/lib/x86_64-linux-gnu/gconv
  install -d -m 0755 "$rootfs/usr/local/bin"
  install -m 0755 "$node_bin" "$rootfs/usr/local/bin/node"
  # Debug symbols are ~18 MB of the binary; strip comes with binutils, when present.
  if command -v strip >/dev/null; then strip --strip-all "$rootfs/usr/local/bin/node"; fi
  tar -C "$rootfs" --numeric-owner -cf - . |
    podman import \
      --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
      --change 'CMD ["node"]' \
      --message "Debian bookworm (libc6, libstdc++6) and Node ${node_version}" \
      - "$base" >/dev/null
  rm -rf "$rootfs"
  echo "npm run image: base $base built in $(elapsed "$started")"
else
  echo "npm run image: base $base exists (TOKENGATE_REBUILD_BASE=1 rebuilds it)"
fi

if [ "${TOKENGATE_REBUILD_BASE:-}" = 1 ] || ! podman image exists "$build_base"; then
  started=$(date +%s)
  printf 'FROM %s\nCOPY . /usr/local/lib/node_modules/npm\n' "$base" >"$work/Containerfile.npm"
  podman build --quiet --format docker -f "$work/Containerfile.npm" -t "$build_base" \
    "$npm_root/npm" >/dev/null
  echo "npm run image: build base $build_base built in $(elapsed "$started")"
fi

started=$(date +%s)
mkdir "$work/context"
npm pack --silent --pack-destination "$work/context" >/dev/null
echo "npm run image: npm pack in $(elapsed "$started")"

# The build stage's npm reaches the registry the way this machine does: its network, and its
# extra CA bundle when there is one (a TLS-intercepting proxy), mounted for the build only.
ca_args=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -r "$NODE_EXTRA_CA_CERTS" ]; then
  ca_args=(--secret "id=ca,src=$(realpath "$NODE_EXTRA_CA_CERTS")"
    --build-arg NODE_EXTRA_CA_CERTS=/run/secrets/ca.crt)
fi

previous="$(podman image inspect --format '{{.Id}}' "$image:$version" 2>/dev/null || true)"
started=$(date +%s)
# --layers=false: no intermediate images are kept (with vfs storage each is a full copy of
# its root, ~1.5 GB a build); the bases above are the cache that matters.
podman build --format docker --layers=false --network host "${ca_args[@]}" \
  --build-arg "BASE_IMAGE=$base" \
  --build-arg "BUILD_IMAGE=$build_base" \
  --build-arg "TOKENGATE_VERSION=$version" \
  -f Containerfile -t "$image:$version" -t "$image:latest" "$work/context"
# The image this build replaced, unless something still uses it.
current="$(podman image inspect --format '{{.Id}}' "$image:$version")"
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
size="$(podman image inspect --format '{{.Size}}' "$image:$version")"
echo "npm run image: $image:$version built in $(elapsed "$started"), $((size / 1000000)) MB"
