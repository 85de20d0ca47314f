#!/usr/bin/env bash
# `cmake --install` must put the DSO in the directory the system libfabric
# searches by default (its FI_PROVIDER_PATH default), and libfabric must load
# it from there. Installs into a scratch DESTDIR, not the system.
set -eu
build=$1 prov=$2
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
DESTDIR="$dest" cmake --install "$build" >/dev/null
default=$(fi_info -e 2>/dev/null | grep -a -A1 '^# FI_PROVIDER_PATH' | sed -n 's/.*(default: \(.*\))$/\1/p')
echo "libfabric default provider dir: $default"
[ -n "$default" ] && [ -f "$dest$default/lib$prov-fi.so" ] || { echo "lib$prov-fi.so not installed under $default"; find "$dest" -name "*.so"; exit 1; }
FI_PROVIDER_PATH="$dest$default" FI_PROVIDER=$prov fi_info | grep -q "provider: $prov"
echo ok
