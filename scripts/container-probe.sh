#!/usr/bin/env bash
# Whether this machine can build and run a container with podman: builds a
# `FROM scratch` image holding a tiny statically linked program (rustc,
# offline), runs it with `--network host`, removes the image. Tries the
# default OCI runtime, then runc (crun refuses a cgroup v1/v2 hybrid host).
# Exit 0 and the podman arguments that worked on stdout (`--runtime runc`,
# or nothing); exit 1 and the reason on stderr otherwise. .ci/run sets
# PRESSURE_REQUIRE_CONTAINERS=1 only when this succeeds.
set -uo pipefail

command -v podman >/dev/null 2>&1 || { echo "no podman" >&2; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/pressure-probe.XXXXXX")
tag="localhost/pressure-probe:$$"
cleanup() {
  podman rmi -f "$tag" >/dev/null 2>&1
  rm -rf -- "$dir"
}
trap cleanup EXIT

echo 'fn main() { println!("probe ok"); }' >"$dir/probe.rs"
if ! rustc -O -C target-feature=+crt-static -o "$dir/probe" "$dir/probe.rs" 2>"$dir/err"; then
  echo "rustc cannot link a static program: $(tr '\n' ' ' <"$dir/err")" >&2
  exit 1
fi
printf 'FROM scratch\nCOPY probe /probe\nUSER 65532:65532\nENTRYPOINT ["/probe"]\n' >"$dir/Containerfile"
if ! timeout 120 podman build -q -t "$tag" "$dir" >/dev/null 2>"$dir/err"; then
  echo "podman build failed: $(tr '\n' ' ' <"$dir/err")" >&2
  exit 1
fi
# Limits below any host's: raising one needs CAP_SYS_RESOURCE, which a
# sandboxed root may lack.
limits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
for runtime in "" "--runtime runc"; do
  read -r -a rt <<<"$runtime"
  if out=$(timeout 60 podman "${rt[@]}" run --rm --network host "${limits[@]}" "$tag" 2>&1) \
    && [[ $out == "probe ok" ]]; then
    echo "$runtime"
    exit 0
  fi
  echo "podman ${runtime:-(default runtime)} run: $out" >"$dir/why-${runtime:+runc}"
done
echo "podman cannot run a container here: $(cat "$dir"/why-* | tr '\n' ' ')" >&2
exit 1
