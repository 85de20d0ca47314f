#!/usr/bin/env bash
# Runs Debian's fi_pingpong server and client for every
# default size; fails if either side fails. Port chosen per run to avoid clashes.
set -u
pp=$1 prov=$2 ep=$3
port=$((20000 + RANDOM % 20000))
timeout 90 "$pp" -p "$prov" -e "$ep" -B "$port" -I 200 >/tmp/pp_srv.$$ 2>&1 &
srv=$!
sleep 0.3
timeout 90 "$pp" -p "$prov" -e "$ep" -P "$port" -I 200 127.0.0.1
cli=$?
wait "$srv"
rc=$?
echo "--- server"; cat /tmp/pp_srv.$$; rm -f /tmp/pp_srv.$$
[ "$cli" -eq 0 ] && [ "$rc" -eq 0 ]
