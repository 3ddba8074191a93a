#!/usr/bin/env bash
# A blue/green roll of a real kcp in a real Kubernetes cluster (kind), with a client sending requests
# through the front the whole time:
#   a kind cluster; the image built and loaded; kubectl apply -k deploy/base; then hack/roll-scenario.sh,
#   the roll scenario: a KcpShard from examples/kcpshard.yaml that runs
#   the real kcp $KCP_FROM, a roll to $KCP_TO, checks (the roll succeeded onto the other slot, the new
#   version serves, no client request failed); cleanup.
#
# Needs Docker (a running daemon), kind, and KCP_IMAGE: the repository of kcp's official image
# (<registry>/kcp-dev/kcp, as kcp's documentation names it; its tags are kcp's versions). The
# project's own machines have no container runtime: this script is for a machine with Docker.
#
# The kcp binary: the host agent runs spec.kcp.binary, a path it sees through its hostPath mount of
# /var/lib/kcpshard. The script copies /kcp out of the official image (a static binary) into the node
# at /var/lib/kcpshard/bin/kcp-<version>; on real nodes put the binaries there the same way (config
# management, or a DaemonSet that copies them out of the image).
#
# The store: the cluster's own etcd (kubeadm's, TLS on 127.0.0.1:2379) under the prefix /kcp, with the
# API server's etcd client certificate in a Secret (spec.store.etcd.tlsSecretRef). Good for a
# throw-away cluster; give a real shard an etcd of its own.
#
# Environment: KCP_IMAGE (required), KCP_FROM (v0.32.1), KCP_TO (v0.32.2), CLUSTER (kcpshard-e2e),
# FRONT_PORT (16443; kind's API server has 6443 on the node), KEEP=1 keeps the cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CLUSTER=${CLUSTER:-kcpshard-e2e}
KCP_FROM=${KCP_FROM:-v0.32.1}
KCP_TO=${KCP_TO:-v0.32.2}
FRONT_PORT=${FRONT_PORT:-16443}
KEEP=${KEEP:-}
IMAGE=kcpshard:0.1.0 # deploy/base's image and the operator's default agent image (builders.DEFAULT_IMAGE)
NODE="$CLUSTER-control-plane"
BIN_ON_NODE=/var/lib/kcpshard/bin

log() { printf 'kind-e2e: %s\n' "$*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}

for tool in docker kind; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed (this script needs Docker and kind)"
done
docker info >/dev/null 2>&1 || fail "the Docker daemon does not answer"
[ -n "${KCP_IMAGE:-}" ] || fail "set KCP_IMAGE to the repository of kcp's official image (<registry>/kcp-dev/kcp)"

# The plugin and a kubectl come with the development setup.
bash hack/bootstrap.sh
export PATH="$ROOT/.venv/bin:$PATH"

WORK=$(mktemp -d)
export KUBECONFIG="$WORK/kubeconfig"
cleanup() {
  local code=$?
  if [ -n "$KEEP" ]; then
    log "keeping cluster $CLUSTER (KUBECONFIG=$KUBECONFIG); delete it with: kind delete cluster --name $CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    rm -rf "$WORK"
  fi
  exit "$code"
}
trap cleanup EXIT

log "cluster $CLUSTER (the front's port $FRONT_PORT mapped to 127.0.0.1 here)"
cat >"$WORK/kind.yaml" <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    extraPortMappings:
      - containerPort: $FRONT_PORT
        hostPort: $FRONT_PORT
        listenAddress: 127.0.0.1
EOF
kind create cluster --name "$CLUSTER" --config "$WORK/kind.yaml" --kubeconfig "$KUBECONFIG" --wait 120s

log "image $IMAGE: build and load"
# the build context is the product's wheels, built on this machine (Dockerfile says why)
docker build -t "$IMAGE" -f "$ROOT/Dockerfile" "$(bash hack/image.sh context)"
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "kcp $KCP_FROM and $KCP_TO from $KCP_IMAGE into the node's $BIN_ON_NODE"
docker exec "$NODE" mkdir -p "$BIN_ON_NODE"
for version in "$KCP_FROM" "$KCP_TO"; do
  docker pull -q "$KCP_IMAGE:$version" >/dev/null
  holder=$(docker create "$KCP_IMAGE:$version")
  docker cp "$holder:/kcp" "$WORK/kcp-$version"
  docker rm "$holder" >/dev/null
  docker cp "$WORK/kcp-$version" "$NODE:$BIN_ON_NODE/kcp-$version"
done

log "operator: deploy/base (each shard's agents get their identity from the operator)"
kubectl apply -k deploy/base
kubectl -n kcpshard-system rollout status deployment/kcpshard-operator --timeout=180s

log "the store: the cluster's etcd under /kcp, with the API server's etcd client certificate"
for file in etcd/ca.crt apiserver-etcd-client.crt apiserver-etcd-client.key; do
  docker exec "$NODE" cat "/etc/kubernetes/pki/$file" >"$WORK/$(basename "$file")"
done
kubectl create secret generic kcp-etcd \
  --from-file=ca.crt="$WORK/ca.crt" \
  --from-file=tls.crt="$WORK/apiserver-etcd-client.crt" \
  --from-file=tls.key="$WORK/apiserver-etcd-client.key"

log "the roll scenario (hack/roll-scenario.sh)"
mkdir -p "$WORK/scenario"
export NODE FRONT_PORT KCP_FROM KCP_TO SHARD=root FRONT_ADDRESS=0.0.0.0 SHUTDOWN_DELAY=5
export BIN_FROM="$BIN_ON_NODE/kcp-$KCP_FROM" BIN_TO="$BIN_ON_NODE/kcp-$KCP_TO"
export STORE='{"etcd": {"endpoints": ["https://127.0.0.1:2379"], "prefix": "/kcp", "tlsSecretRef": {"name": "kcp-etcd"}}}'
WORK="$WORK/scenario" bash hack/roll-scenario.sh
