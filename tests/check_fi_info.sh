#!/usr/bin/env bash
# fi_info lists the provider, fi_info -e lists its knobs, impossible hints
# give no entry.
set -eu
prov=$1
up=$(echo "$prov" | tr a-z A-Z)
out=$(FI_PROVIDER=$prov fi_info)
echo "$out" | grep -q "provider: $prov" || { echo "fi_info does not list $prov"; exit 1; }
knobs=$(fi_info -e | grep -a -c "^# FI_${up}_" || true)
echo "knobs listed: $knobs"
[ "$knobs" -ge 5 ]
if FI_PROVIDER=$prov fi_info -t FI_EP_MSG 2>/dev/null | grep -q "provider: $prov"; then
  echo "$prov claims FI_EP_MSG"; exit 1
fi
echo ok
