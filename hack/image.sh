#!/usr/bin/env bash
# Builds the product image (Dockerfile: operator, agents, plugin) with no image registry: a Debian base
# made with debootstrap, the product's wheels built on the host, then `buildah bud` and a docker-archive
# tar that `ctr -n k8s.io images import <tar>` takes.
#
#   hack/image.sh                  the product image kcpshard:<key>            (make image)
#   hack/image.sh test             the test image kcpshard-test:<key>: the product image plus the test
#                                  kit (the stand-in kcp)                       (make test-image)
#   hack/image.sh context [test]   only the build context (the wheels); prints its folder, for
#                                  `docker build -f Dockerfile "$(hack/image.sh context)"`
#
# Each part is built once per key: the base per suite, variant and packages; the image per Dockerfile,
# pyproject.toml, the files under operator/ (and testkit/ for the test image) and the base. An image
# whose tar exists is not built again. Progress goes to stderr; the last line on stdout is
#   image=<name:tag> tar=<path> root=<buildah root> runroot=<buildah runroot>
# The cache (KCPSHARD_IMAGE_CACHE, default ~/.cache/kcpshard/image) holds the tars, with
# kcpshard-latest.tar and kcpshard-test-latest.tar linking the newest, the logs, and buildah's own
# storage (vfs), so the machine's /var/lib/containers is untouched. Needs root (debootstrap, buildah).
# KCPSHARD_DEBIAN_MIRROR overrides debootstrap's default mirror.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
cache="${KCPSHARD_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kcpshard/image}"
venv="${KCPSHARD_VENV:-$ROOT/.venv}"
B=(buildah --root "$cache/storage" --runroot "$cache/run" --storage-driver vfs)

BASE_SUITE=bookworm
BASE_VARIANT=minbase
BASE_INCLUDE="" # minbase as is: the Dockerfile installs the rest with apt-get
# What debian:bookworm-slim keeps out of its packages: documentation, man pages, translations.
DPKG_EXCLUDES='path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*'

log() { printf 'image: %s\n' "$*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}
now() { echo "${EPOCHREALTIME/./}"; }
since() { # microseconds from now(): seconds with one decimal
  local us=$(($(now) - $1))
  printf '%d.%d s' $((us / 1000000)) $((us % 1000000 / 100000))
}

# step NAME COMMAND...: runs a step with its output in a log, says how long it took, and on failure which
# step failed and where its log is.
step() {
  local name=$1 started
  shift
  local logfile="$cache/logs/$name.log"
  started=$(now)
  log "$name ..."
  if "$@" >"$logfile" 2>&1; then
    log "$name: done in $(since "$started")"
  else
    local code=$?
    tail -n 15 "$logfile" | sed 's/^/  | /' >&2
    fail "step '$name' (exit $code) after $(since "$started"); its log: $logfile"
  fi
}

tree_hash() { # the names and contents of a folder's files, without Python's and setuptools' leftovers
  find "$@" -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -path 'testkit/build/*' ! -path 'operator/build/*' -print0 | sort -z | xargs -0 sha256sum
}

image_size() { "${B[@]}" images --noheading --format '{{.Size}}' --filter "reference=$1" | head -n1; }
has_image() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }

make_base() { # debootstrap into a scratch container's root, then commit it as $base_image
  local ctr mnt
  ctr=$("${B[@]}" from scratch) || return
  mnt=$("${B[@]}" mount "$ctr") || return
  # shellcheck disable=SC2086 # BASE_INCLUDE and the mirror are optional words
  if ! debootstrap --variant="$BASE_VARIANT" ${BASE_INCLUDE:+--include="$BASE_INCLUDE"} \
    "$BASE_SUITE" "$mnt" ${KCPSHARD_DEBIAN_MIRROR:-}; then
    "${B[@]}" rm "$ctr"
    return 1
  fi
  printf '%s\n' "$DPKG_EXCLUDES" >"$mnt/etc/dpkg/dpkg.cfg.d/excludes" &&
    rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/cache/apt/archives/*.deb \
      "$mnt"/usr/share/man/* "$mnt"/usr/share/info/* "$mnt"/usr/share/locale/* &&
    # debootstrap copies the host's; a container runtime mounts its own
    rm -f "$mnt/etc/resolv.conf" "$mnt/etc/hostname" &&
    find "$mnt/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete &&
    "${B[@]}" config --cmd /bin/bash "$ctr" &&
    "${B[@]}" commit --rm "$ctr" "$base_image"
}

wheels() { # the wheels of the given projects and of their dependencies, into $ctx/wheels
  # compiled wheels are for the venv's Python: it must be the image's, Debian bookworm's 3.11
  "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
    { echo "the venv's Python is not 3.11 (the image's): its wheels would not install" && return 1; }
  rm -rf "$ctx" && mkdir -p "$ctx/wheels" && "$venv/bin/pip" wheel -w "$ctx/wheels" "$@"
}

export_tar() { # image, name in the tar, tar: written aside, then moved, so a tar that exists is whole
  rm -f "$3.part" && "${B[@]}" push "$1" "docker-archive:$3.part:$2" && mv "$3.part" "$3"
}

prune() { # the images and tars of this kind's other keys: the storage is vfs, a full copy per layer
  local old
  for old in $("${B[@]}" images --noheading --format '{{.Name}}:{{.Tag}}'); do
    case "$old" in
      "localhost/$1:$2" | "localhost/$1:dev") ;;
      "localhost/$1:"*) "${B[@]}" rmi "$old" >/dev/null || log "could not remove $old" ;;
    esac
  done
  # The two newest other tars stay: a clone built beside this one (a CI run of main) still uses its own.
  find "$cache" -maxdepth 1 -regextype posix-extended -regex ".*/$1-[0-9a-f]{16}\.tar" ! -name "$1-$2.tar" \
    -printf '%T@ %p\n' | sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -f --
  "${B[@]}" rmi --prune >/dev/null 2>&1 || true
}

mode=${1:-product}
context_only=""
if [ "$mode" = context ]; then
  context_only=1
  mode=${2:-product}
fi
case "$mode" in product | test) ;; *) fail "usage: hack/image.sh [product|test|context [product|test]]" ;; esac
[ -x "$venv/bin/pip" ] || fail "no virtualenv at $venv: run make bootstrap first"

mkdir -p "$cache/logs"
exec 9>"$cache/lock"
flock -n 9 || {
  log "waiting for another image build to end ($cache/lock)"
  flock 9
}

if [ -n "$context_only" ]; then
  ctx="$cache/context/$mode"
  if [ "$mode" = product ]; then step wheels wheels "$ROOT"; else step wheels-test wheels "$ROOT" "$ROOT/testkit"; fi
  echo "$ctx"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, buildah mount); with Docker use: hack/image.sh context"
for tool in buildah debootstrap flock; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (Debian: apt-get install buildah debootstrap)"
done

# Working containers of a build that was killed: with the lock held, no build of ours is running.
for stale in $("${B[@]}" containers --noheading --format '{{.ContainerName}}' 2>/dev/null); do
  case "$stale" in *working-container*) "${B[@]}" rm "$stale" >/dev/null || true ;; esac
done

total=$(now)
base_key=$({ printf '%s\n' "$BASE_SUITE" "$BASE_VARIANT" "$BASE_INCLUDE" "$DPKG_EXCLUDES"; declare -f make_base; } |
  sha256sum | cut -c1-12)
base_image="localhost/kcpshard-base:$BASE_SUITE-$base_key"
key=$({ echo "$base_key"; cat Dockerfile pyproject.toml; tree_hash operator; } | sha256sum | cut -c1-16)
tar="$cache/kcpshard-$key.tar"

load_tar() { # tar, local name: an image whose tar is cached but which the storage no longer holds
  step load "${B[@]}" pull --quiet "docker-archive:$1"
  "${B[@]}" tag "$(tail -n1 "$cache/logs/load.log")" "$2"
  "${B[@]}" rmi "docker.io/library/${2#localhost/}" >/dev/null 2>&1 || true # the tar's name; prune sees localhost/
}

cached() { # local name, tar: the image ready from the cache (built before, or its tar loaded back); 1: build it
  [ -f "$2" ] || return 1
  if has_image "$1"; then
    log "${1#localhost/}: built before (cached): $2"
  else # the tar outlived its image in the storage (another key's build pruned it): tests run it from there
    load_tar "$2" "$1"
  fi
}

result() { # the line another script reads: name in the tar, the tar, buildah's storage
  printf 'image=%q tar=%q root=%q runroot=%q\n' "$1" "$2" "$cache/storage" "$cache/run"
}

# The product image; the test image is built on it, from buildah's storage.
if ! cached "localhost/kcpshard:$key" "$tar"; then
  if has_image "$base_image"; then
    log "base $base_image: built before (cached)"
  else
    step base make_base
    prune kcpshard-base "$BASE_SUITE-$base_key"
  fi
  ctx="$cache/context/product"
  step wheels wheels "$ROOT"
  step build "${B[@]}" bud --pull-never --network host --isolation chroot -f "$ROOT/Dockerfile" \
    --build-arg "BASE=$base_image" -t "kcpshard:$key" "$ctx"
  "${B[@]}" tag "localhost/kcpshard:$key" kcpshard:dev
  step export export_tar "localhost/kcpshard:$key" "kcpshard:$key" "$tar"
  ln -sfn "$(basename "$tar")" "$cache/kcpshard-latest.tar"
  prune kcpshard "$key"
  log "kcpshard:$key: $(image_size "localhost/kcpshard:$key"), tar $(du -h "$tar" | cut -f1): $tar"
fi

if [ "$mode" = product ]; then
  log "total: $(since "$total")"
  result "kcpshard:$key" "$tar"
  exit 0
fi

test_key=$({ echo "$key"; tree_hash testkit; } | sha256sum | cut -c1-16)
test_tar="$cache/kcpshard-test-$test_key.tar"
if ! cached "localhost/kcpshard-test:$test_key" "$test_tar"; then
  ctx="$cache/context/test"
  step wheels-test wheels "$ROOT" "$ROOT/testkit"
  step build-test "${B[@]}" bud --pull-never --network host --isolation chroot -f "$ROOT/testkit/Dockerfile" \
    --build-arg "PRODUCT=localhost/kcpshard:$key" -t "kcpshard-test:$test_key" "$ctx"
  "${B[@]}" tag "localhost/kcpshard-test:$test_key" kcpshard-test:dev
  step export-test export_tar "localhost/kcpshard-test:$test_key" "kcpshard-test:$test_key" "$test_tar"
  ln -sfn "$(basename "$test_tar")" "$cache/kcpshard-test-latest.tar"
  prune kcpshard-test "$test_key"
  log "kcpshard-test:$test_key: $(image_size "localhost/kcpshard-test:$test_key"), tar $(du -h "$test_tar" | cut -f1): $test_tar"
fi
log "total: $(since "$total")"
result "kcpshard-test:$test_key" "$test_tar"
