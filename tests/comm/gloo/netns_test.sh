#!/bin/sh
# Two "hosts" as two network namespaces joined by a veth pair: braid-rendezvous and rank 0 in the
# first (10.251.R.1), rank 1 in the second (10.251.R.2), each started by its own braid-launch
# (--server, --world-size 2, --first-rank). Neither sets BRAID_GLOO_HOST: each rank listens on
# the address its route to the server leaves from. Exits 77 (skipped) where namespaces cannot
# be made (not root, or no CAP_SYS_ADMIN).
#
#     netns_test.sh BRAID_SERVER BRAID_LAUNCH BRAID_GLOO_TESTS
set -eu
server=$1 launch=$2 tests=$3
id=$$
ns0=braid-gloo-$id-0 ns1=braid-gloo-$id-1 veth0=bg$id-a veth1=bg$id-b
net=10.251.$((id % 250))
tmp=$(mktemp -d)
fail() { echo "FAIL: $*" >&2; exit 1; }
cleanup() {
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
    ip netns del "$ns0" 2>/dev/null || true
    ip netns del "$ns1" 2>/dev/null || true
    rm -rf "$tmp"
}
if ! ip netns add "$ns0" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here"
    rm -rf "$tmp"
    exit 77
fi
trap cleanup EXIT
ip netns add "$ns1"
ip link add "$veth0" type veth peer name "$veth1"
ip link set "$veth0" netns "$ns0"
ip link set "$veth1" netns "$ns1"
ip -n "$ns0" addr add "$net.1/24" dev "$veth0"
ip -n "$ns1" addr add "$net.2/24" dev "$veth1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$veth0" up
ip -n "$ns1" link set "$veth1" up

ip netns exec "$ns0" "$server" --host "$net.1" --port 29611 > "$tmp/server.txt" &
server_pid=$!
export BRAID_COMM_TIMEOUT=30
ip netns exec "$ns0" env BRAID_TEST_REPORT="$tmp/rank0.txt" "$launch" -n 1 --timeout 60 \
    --server "$net.1:29611" --world-size 2 -- "$tests" --worker two-addresses &
rank0=$!
ip netns exec "$ns1" env BRAID_TEST_REPORT="$tmp/rank1.txt" "$launch" -n 1 --timeout 60 \
    --server "$net.1:29611" --world-size 2 --first-rank 1 -- "$tests" --worker two-addresses ||
    fail "rank 1 (namespace $ns1): $(cat "$tmp/rank1.txt" 2>/dev/null)"
wait "$rank0" || fail "rank 0 (namespace $ns0): $(cat "$tmp/rank0.txt" 2>/dev/null)"
for r in 0 1; do
    got=$(cat "$tmp/rank$r.txt")
    [ "$got" = "1 1 1 1 2 2 2 2 | 3" ] || fail "rank $r: got \"$got\""
done
echo "two namespaces ($net.1, $net.2): all_gather and all_reduce over gloo agree"
