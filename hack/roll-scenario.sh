#!/usr/bin/env bash
# The blue/green roll scenario, on any cluster where the operator runs: hack/kind-e2e.sh runs it on kind;
# tests/node/test_real_node.py runs it on the local real node; run it by hand on any other cluster.
#   a KcpShard from examples/kcpshard.yaml on kcp $KCP_FROM, until Ready; a client through the front with the
#   shard-admin credentials (a new kubectl, so a new connection, per request); a roll to kcp $KCP_TO; checks:
#   the roll Succeeded onto the other slot, the front serves $KCP_TO, the client got answers and none failed.
#
# Environment (required): KUBECONFIG, NODE, FRONT_PORT, STORE (spec.store as JSON), KCP_FROM, KCP_TO,
# BIN_FROM, BIN_TO (the kcp binaries, as the node's host agent sees them). Optional: SHARD (root),
# FRONT_ADDRESS (0.0.0.0), SHUTDOWN_DELAY (5), READY_TIMEOUT (10m), ROLL_TIMEOUT (15m), WORK (a temporary
# folder, removed afterwards). Needs kubectl with the kcpshard plugin on PATH (make bootstrap's .venv/bin).
# The shard stays afterwards (delete it with kubectl delete kcpshard $SHARD).
set -euo pipefail
cd "$(dirname "$0")/.."

for name in KUBECONFIG NODE FRONT_PORT STORE KCP_FROM KCP_TO BIN_FROM BIN_TO; do
  [ -n "${!name:-}" ] || {
    echo "roll-scenario: set $name (the header of $0 says what each variable is)" >&2
    exit 2
  }
done
SHARD=${SHARD:-root}
FRONT_ADDRESS=${FRONT_ADDRESS:-0.0.0.0}
SHUTDOWN_DELAY=${SHUTDOWN_DELAY:-5}
READY_TIMEOUT=${READY_TIMEOUT:-10m}
ROLL_TIMEOUT=${ROLL_TIMEOUT:-15m}
OWN_WORK=""
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d)
  OWN_WORK=1
fi

log() { printf 'roll-scenario: %s\n' "$*" >&2; }
fail() {
  log "FAILED: $*"
  exit 1
}

CLIENT_PID=""
cleanup() {
  local code=$?
  [ -z "$CLIENT_PID" ] || kill "$CLIENT_PID" 2>/dev/null || true
  [ -z "$OWN_WORK" ] || rm -rf "$WORK"
  exit "$code"
}
trap cleanup EXIT

log "shard $SHARD on kcp $KCP_FROM, from examples/kcpshard.yaml"
shard_patch=$(
  cat <<EOF
{"metadata": {"name": "$SHARD"},
 "spec": {
  "node": "$NODE",
  "kcp": {"version": "$KCP_FROM", "binary": "$BIN_FROM"},
  "store": $STORE,
  "front": {"address": "$FRONT_ADDRESS", "port": $FRONT_PORT},
  "shard": {"baseURL": "https://127.0.0.1:$FRONT_PORT"},
  "shutdownDelaySeconds": $SHUTDOWN_DELAY
}}
EOF
)
kubectl patch --local -f examples/kcpshard.yaml --type merge -p "$shard_patch" -o yaml | kubectl apply -f -
kubectl kcpshard status "$SHARD" --wait --timeout "$READY_TIMEOUT"

log "a client through the front, with the shard-admin credentials (they survive a new kcp start)"
kubectl get secret "$SHARD-shared" -o jsonpath='{.data.admin\.kubeconfig}' | base64 -d >"$WORK/admin.kubeconfig"
chmod 600 "$WORK/admin.kubeconfig"
# kcp writes the file with its own port (the slot's, not the front's): --server names the front.
front() { kubectl --kubeconfig "$WORK/admin.kubeconfig" --context shard-base --server "https://127.0.0.1:$FRONT_PORT" "$@"; }
front get --raw /version | grep -q "kcp-$KCP_FROM" || fail "the front does not serve kcp $KCP_FROM"
client() {
  local ok=0 failed=0
  while [ ! -e "$WORK/stop" ]; do
    if front get --raw /clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces >/dev/null 2>>"$WORK/client.err"; then
      ok=$((ok + 1))
    else
      failed=$((failed + 1))
    fi
    echo "$ok $failed" >"$WORK/client.count"
  done
}
client &
CLIENT_PID=$!
answered() { [ -f "$WORK/client.count" ] && read -r ok _ <"$WORK/client.count" && [ "$ok" -gt 0 ]; }
for _ in $(seq 300); do # the client's first answer, before the roll starts (at most 30 s)
  answered && break
  sleep 0.1
done
answered || fail "the client got no answer through the front before the roll: $(tail -n 3 "$WORK/client.err" 2>/dev/null)"

log "roll to kcp $KCP_TO"
from_slot=$(kubectl get kcpshard "$SHARD" -o jsonpath='{.status.activeSlot}')
kubectl patch kcpshard "$SHARD" --type merge \
  -p "{\"spec\": {\"kcp\": {\"version\": \"$KCP_TO\", \"binary\": \"$BIN_TO\"}}}"
kubectl kcpshard status "$SHARD" --wait --timeout "$ROLL_TIMEOUT"
touch "$WORK/stop"
wait "$CLIENT_PID"
CLIENT_PID=""

log "checks"
kubectl kcpshard status "$SHARD"
kubectl kcpshard history "$SHARD"
result=$(kubectl get kcpshard "$SHARD" -o jsonpath='{.status.lastRoll.result}')
[ "$result" = Succeeded ] || fail "the roll ended $result"
to_slot=$(kubectl get kcpshard "$SHARD" -o jsonpath='{.status.activeSlot}')
[ "$to_slot" != "$from_slot" ] || fail "the shard still serves slot $from_slot: no blue/green roll"
front get --raw /version | grep -q "kcp-$KCP_TO" || fail "the front does not serve kcp $KCP_TO"
read -r ok failed <"$WORK/client.count"
log "client: $ok requests answered, $failed failed"
[ "$failed" -eq 0 ] || fail "$failed client requests failed: $(tail -n 3 "$WORK/client.err")"
log "OK: kcp $KCP_FROM -> $KCP_TO blue/green (slot $from_slot -> $to_slot) with no failed request"
