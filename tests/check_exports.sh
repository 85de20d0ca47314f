#!/usr/bin/env bash
# The DSO must export exactly one symbol: fi_prov_ini.
set -eu
syms=$(nm -D --defined-only "$1" | awk '{print $3}' | sort)
echo "exported: $syms"
[ "$syms" = "fi_prov_ini" ]
