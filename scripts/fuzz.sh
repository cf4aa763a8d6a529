#!/usr/bin/env bash
# `make fuzz`: libFuzzer (with AddressSanitizer) on the API's notification body readers.
#
#   scripts/fuzz.sh              FUZZ_SECONDS (default 300) of fuzzing from Tests/Fuzz/corpus
#   scripts/fuzz.sh CRASH_FILE   run one input again (a reproducer libFuzzer wrote)
#
# The target is built with swiftc from HeraldCore's sources and the daemon's NotificationBody.swift
# (one module, as libFuzzer needs its own main); see Tests/Fuzz/NotificationBodyFuzz.swift.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.build/fuzz
mkdir -p "$out/src" "$out/corpus"
rm -f "$out"/src/*.swift
cp Sources/HeraldCore/*/*.swift "$out/src/"
sed 's/^import HeraldCore$//' Sources/HeraldServer/API/NotificationBody.swift > "$out/src/NotificationBody.swift"
cp Tests/Fuzz/NotificationBodyFuzz.swift "$out/src/"
echo "fuzz: building the target (about a minute)" >&2
swiftc -O -sanitize=fuzzer,address -parse-as-library -module-name HeraldCore -package-name herald \
  "$out"/src/*.swift -o "$out/notification-body"
if [ $# -gt 0 ]; then exec "$out/notification-body" "$@"; fi
cp -n Tests/Fuzz/corpus/* "$out/corpus/" 2>/dev/null || true
exec "$out/notification-body" -dict=Tests/Fuzz/notification.dict -max_len=4096 -timeout=5 -rss_limit_mb=4096 \
  -max_total_time="${FUZZ_SECONDS:-300}" -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus"
