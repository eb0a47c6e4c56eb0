#!/usr/bin/env bash
# Builds the pressure container image (deploy/Containerfile) offline:
# a statically linked `pressure` compiled on this machine (glibc,
# `-C target-feature=+crt-static`), the host's CA bundle and a passwd/group
# for the non-root user 65532, on an empty base (`FROM scratch`: nothing is
# downloaded). See docs/deploy.md.
#
#   scripts/build-image.sh [--profile release|dev] [--tag IMAGE]
#
#   --profile  cargo profile of the binary (default release; the CI test
#              uses dev, which builds in a third of the time)
#   --tag      image name (default localhost/pressure:<version>)
#
# Environment: CONTAINER_ENGINE (podman, else buildah, else docker: the
# first found), CARGO_TARGET_DIR (cargo's, as usual), PODMAN_ARGS (extra
# arguments before `build`, e.g. `--storage-driver vfs`).
# Prints the image name on stdout as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
tag=
while (($#)); do
  case $1 in
    --profile) profile=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "usage: $0 [--profile release|dev] [--tag IMAGE]" >&2; exit 2 ;;
  esac
done

log() { echo "build-image: $*" >&2; }

engine=${CONTAINER_ENGINE:-}
if [[ -z $engine ]]; then
  for e in podman buildah docker; do
    if command -v "$e" >/dev/null 2>&1; then engine=$e; break; fi
  done
fi
[[ -n $engine ]] || { log "no podman, buildah or docker"; exit 1; }

triple="$(uname -m)-unknown-linux-gnu"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
tag=${tag:-localhost/pressure:$version}

# The static binary. `--target` keeps it apart from the ordinary (dynamic)
# build: build scripts and proc macros stay host builds without the flag.
log "cargo build --profile $profile --target $triple (crt-static)"
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --locked --profile "$profile" --target "$triple" -p pressure-cli >&2
dir=$profile
[[ $profile == dev ]] && dir=debug
bin="${CARGO_TARGET_DIR:-target}/$triple/$dir/pressure"
# No NEEDED entry and no interpreter: the empty base has no libc to load.
if ldd "$bin" 2>&1 | grep -q '=>'; then
  log "$bin is dynamically linked: $(ldd "$bin" 2>&1 | tr '\n' ' ')"
  exit 1
fi

ca=/etc/ssl/certs/ca-certificates.crt
[[ -s $ca ]] || { log "no CA bundle at $ca (Debian package ca-certificates)"; exit 1; }

context=$(mktemp -d "${TMPDIR:-/tmp}/pressure-image.XXXXXX")
trap 'rm -rf -- "$context"' EXIT
cp deploy/Containerfile "$context/Containerfile"
cp "$bin" "$context/pressure"
strip "$context/pressure" 2>/dev/null || true
cp "$ca" "$context/ca-certificates.crt"
echo 'nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin' >"$context/passwd"
echo 'nonroot:x:65532:' >"$context/group"

log "$engine build -t $tag"
case $engine in
  podman) read -r -a extra <<<"${PODMAN_ARGS:-}"
          podman "${extra[@]}" build --layers=false --build-arg VERSION="$version" -t "$tag" -f "$context/Containerfile" "$context" >&2 ;;
  buildah) buildah bud --isolation chroot --build-arg VERSION="$version" -t "$tag" -f "$context/Containerfile" "$context" >&2 ;;
  *) "$engine" build --build-arg VERSION="$version" -t "$tag" -f "$context/Containerfile" "$context" >&2 ;;
esac
echo "$tag"
