#!/usr/bin/env bash
# Builds the real parts the tests run on, from their Go modules, with the go.mod files beside
# this script: kube-apiserver and kube-controller-manager, etcd and etcdctl 3.6, kcp (two
# minors: v0.31.2 and v0.30.0) and its cache-server and kcp-front-proxy (v0.31.2), kine, kstatus
# (a checker of Flux's health rule), argocd-lua (Argo CD's Lua VM and argocd-cm parser, which run
# our Argo CD health checks), promtool (Prometheus' rule checker) and helm (renders and installs
# the chart). Each binary
# is built once per key (its module's go.mod/go.sum, our mains, the build line and the Go
# version) into a cache outside the checkout, and linked into
# hack/tools/bin. The modules are fetched all at once first, and two modules build at a time
# (TOOLS_JOBS). A part that fails to build is reported with its module and error; the others
# go on, and the script exits non-zero at the end.
#
#   hack/tools/build.sh            all parts
#   hack/tools/build.sh kcp etcd   only these
#
# KCPSHARD_TOOLS_CACHE sets the cache (default ~/.cache/kcpshard/tools).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/bin"
cache="${KCPSHARD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kcpshard/tools}"

# Go's own installer puts it in /usr/local/go; a shell without its profile may not have it on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then PATH="$PATH:/usr/local/go/bin"; fi
if ! command -v go >/dev/null 2>&1; then
  echo "tools: Go is not installed. Install Go 1.26 or newer (Debian: golang-go from backports," >&2
  echo "       or the official release in /usr/local/go) and put 'go' on PATH, then run make test again." >&2
  exit 1
fi
mkdir -p "$bin" "$cache"
# Fork pseudo-versions of kcp's kubernetes are served by the module proxy but not listed in the
# checksum database; go.sum pins their hashes, so skipping the database for them loses nothing.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/kcp-dev"
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

KUBE_VERSION=v1.37.2
kube_ldflags() { # Kubernetes' hack/lib/version.sh: without these /version reports a placeholder
  local v=$1 minor
  minor=$(echo "$v" | cut -d. -f2)
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1" \
    "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    "-X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1" \
    "-X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

# name | module dir | package | CGO_ENABLED | tags | ldflags | version shown (longest modules first)
tools() {
  echo "kube-apiserver|kube|k8s.io/kubernetes/cmd/kube-apiserver|0|selinux,notest|$(kube_ldflags $KUBE_VERSION)|$KUBE_VERSION"
  echo "kube-controller-manager|kube|k8s.io/kubernetes/cmd/kube-controller-manager|0|selinux,notest|$(kube_ldflags $KUBE_VERSION)|$KUBE_VERSION"
  # The node: the scheduler and the kubelet, from the same module (Kubernetes' local-up-cluster.sh set)
  echo "kube-scheduler|kube|k8s.io/kubernetes/cmd/kube-scheduler|0|selinux,notest|$(kube_ldflags $KUBE_VERSION)|$KUBE_VERSION"
  echo "kubelet|kube|k8s.io/kubernetes/cmd/kubelet|0|selinux,notest|$(kube_ldflags $KUBE_VERSION)|$KUBE_VERSION"
  # kcp's Makefile: CGO off, the Kubernetes version fields set to <kube>+kcp-<version>
  # (kcp/go.mod says why v0.31.2 is the newest, kcp-0.30/go.mod what the older minor needed)
  echo "kcp|kcp|github.com/kcp-dev/kcp/cmd/kcp|0||$(kube_ldflags v1.35.1+kcp-v0.31.2)|v0.31.2"
  echo "kcp-v0.30|kcp-0.30|github.com/kcp-dev/kcp/cmd/kcp|0||$(kube_ldflags v1.34.2+kcp-v0.30.0)|v0.30.0"
  # kcp's cache server and front-proxy (a sharded kcp: tests/e2e/test_real_fleet.py), same module and flags
  echo "cache-server|kcp|github.com/kcp-dev/kcp/cmd/cache-server|0||$(kube_ldflags v1.35.1+kcp-v0.31.2)|v0.31.2"
  echo "kcp-front-proxy|kcp|github.com/kcp-dev/kcp/cmd/kcp-front-proxy|0||$(kube_ldflags v1.35.1+kcp-v0.31.2)|v0.31.2"
  # kine's scripts/build: cgo with mattn/go-sqlite3
  echo "kine|kine|github.com/k3s-io/kine|1|sqlite_unlock_notify|-s -w|v0.17.5"
  # Argo CD's health of a resource from argocd-cm, with its own util/lua (tests/process/test_argocd_health.py)
  echo "argocd-lua|argocd-lua|.|0||-s -w|argo-cd-v3.2.12"
  # Prometheus' promtool checks and unit-tests the alerting rules (tests/process/test_alerts.py);
  # remove_all_sd leaves out the service discovery plugins, which rule checks never use
  echo "promtool|promtool|github.com/prometheus/prometheus/cmd/promtool|0|remove_all_sd|-s -w|v3.16.0"
  # Helm renders and installs the chart in deploy/helm (its Makefile: CGO off, the version stamped)
  echo "helm|helm|helm.sh/helm/v4/cmd/helm|0||-s -w -X helm.sh/helm/v4/internal/version.version=v4.3.2|v4.3.2"
  echo "etcd|etcd|./cmd/etcd|0||-s -w|v3.6.16"
  echo "etcdctl|etcd|go.etcd.io/etcd/etcdctl/v3|0||-s -w|v3.6.16"
  # Flux's health rule, computed by sigs.k8s.io/cli-utils' kstatus (tests/process/test_kstatus.py)
  echo "kstatus|kstatus|.|0||-s -w|cli-utils-v0.37.2"
}

key_of() { # module dir, build line
  local dir="$here/$1"
  { cat "$dir/go.mod" "$dir/go.sum"; find "$dir" -name '*.go' -print0 | sort -z | xargs -0 -r cat
    echo "$2"; go version; } | sha256sum | cut -c1-16
}

wanted=("$@")
rows=()
while IFS='|' read -r name dir pkg cgo tags ldflags version; do
  if [ ${#wanted[@]} -gt 0 ]; then
    case " ${wanted[*]} " in *" $name "*) ;; *) continue ;; esac
  fi
  rows+=("$name|$dir|$pkg|$cgo|$tags|$ldflags|$version")
done < <(tools)

build_one() { # one row of tools(); exit status 0 when the binary is there
  local name dir pkg cgo tags ldflags version key target start log
  IFS='|' read -r name dir pkg cgo tags ldflags version <<<"$1"
  key=$(key_of "$dir" "$pkg $cgo $tags $ldflags")
  target="$cache/$name-$version-$key"
  if [ -x "$target" ]; then
    ln -sfn "$target" "$bin/$name"
    echo "tools: $name $version: built before (key $key)"
    return 0
  fi
  start=$(date +%s)
  log="$cache/$name-$version-$key.log"
  if (cd "$here/$dir" && CGO_ENABLED=$cgo go build -trimpath ${tags:+-tags "$tags"} -ldflags "$ldflags" \
      -o "$target.tmp" "$pkg") >"$log" 2>&1; then
    mv "$target.tmp" "$target"
    ln -sfn "$target" "$bin/$name"
    echo "tools: $name $version: built in $(($(date +%s) - start)) s"
  else
    echo "tools: $name $version ($dir/go.mod, $pkg) failed to build after $(($(date +%s) - start)) s:" >&2
    tail -n 15 "$log" | sed 's/^/    /' >&2
    return 1
  fi
}

# A cold machine spends minutes fetching modules one build after another; fetched all at once (the
# network, not the cores) while the first builds compile, they are there when each build needs them.
mapfile -t dirs < <(printf '%s\n' "${rows[@]}" | cut -d'|' -f2 | awk '!seen[$0]++') # each module once, in order
for dir in "${dirs[@]}"; do
  (cd "$here/$dir" && go mod download >/dev/null 2>&1 &)
done

build_module() { # the parts of one module, one after another: they share its packages in the build cache
  local row
  for row in "${rows[@]}"; do
    [ "$(cut -d'|' -f2 <<<"$row")" = "$1" ] || continue
    build_one "$row" || echo "${row%%|*}" >>"$failures"
  done
}

# Two modules at a time: a build leaves a core idle while it links (one thread) or waits on a long
# chain of packages, and the other fills it. The modules come in the order of tools(), longest first.
# TOOLS_JOBS=1 builds one after another.
jobs_max="${TOOLS_JOBS:-2}"
failures=$(mktemp)
trap 'rm -f "$failures"' EXIT
running=0
for dir in "${dirs[@]}"; do
  if [ "$running" -ge "$jobs_max" ]; then wait -n; running=$((running - 1)); fi
  build_module "$dir" &
  running=$((running + 1))
done
wait

if [ -s "$failures" ]; then
  echo "tools: not built: $(tr '\n' ' ' <"$failures")" >&2
  exit 1
fi
