#!/usr/bin/env bash
# Cross-region layouts: where each failover branch's alarm lives and which prober feeds it,
# compared with `readyprobe simulate` (pure, offline, deterministic) on every cross-region
# scenario under probes/: per layout (own region, other region, calculated threshold 1 and 2)
# and InsufficientDataHealthStatus, how long Route 53 took to give each right answer, how many
# wrong answers it gave and how long it answered wrong. Prints two Markdown tables: the wrong
# answers per layout and scenario, then every row. See BENCHMARKS.md ("Cross-region layouts").
#
#   bench/layouts.sh
#   CONFIG=probes/fleet.toml SERVICE=payments-db bench/layouts.sh
#   SCENARIOS="probes/scenario-path-cut.toml" bench/layouts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-probes/orders-db.toml}
SERVICE=${SERVICE:-}
SCENARIOS=${SCENARIOS:-$(ls probes/scenario-region-dark.toml probes/scenario-region-dark-stale.toml \
  probes/scenario-cloudwatch-impaired.toml probes/scenario-path-cut.toml \
  probes/scenario-path-cut-both-ways.toml probes/scenario-readonly-primary.toml)}
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release/readyprobe}
[ -x "$BIN" ] || { echo "layouts: building $BIN" >&2; cargo build --release --locked; }
command -v jq >/dev/null || { echo "layouts: jq is required" >&2; exit 1; }
rows=$(mktemp); trap 'rm -f "$rows"' EXIT

for sc in $SCENARIOS; do
  args=(simulate --config "$CONFIG" --scenario "$sc" --format json)
  [ -n "$SERVICE" ] && args+=(--service "$SERVICE")
  "$BIN" "${args[@]}" | jq -c --arg sc "$(basename "$sc" .toml | sed 's/^scenario-//')" '
    if (.layouts // []) == [] then error("\($sc): no [[region]], no layouts") else . end
    | .layouts[] | . + {scenario: $sc}' >> "$rows"
done
jq -rs '
  def t: if . == null then "never"
    else (. / 1000 | floor) as $s
      | if $s >= 60 then "\($s / 60 | floor)m\(if $s % 60 > 0 then "\($s % 60)s" else "" end)"
        else "\($s)s" end end;
  def layout: if type == "object" then "calculated, threshold \(.calculated)"
    else gsub("_"; " ") end;
  ([.[].scenario] | reduce .[] as $s ([]; if index($s) then . else . + [$s] end)) as $scs
  | "| layout | insufficient data | " + ($scs | join(" | ")) + " | total |",
    "| --- | --- |" + ($scs | map(" ---: |") | join("")) + " ---: |",
    (group_by([(.layout | layout), .insufficient_data]) | sort_by(.[0].layout | layout)[]
      | . as $g
      | "| \($g[0].layout | layout) | \($g[0].insufficient_data) | "
        + ($scs | map(. as $s | ($g[] | select(.scenario == $s) | .wrong_answers | tostring)) | join(" | "))
        + " | \(map(.wrong_answers) | add) |"),
    "",
    "| scenario | layout | insufficient data | right answer: time to give it | wrong answers | answering wrong |",
    "| --- | --- | --- | --- | ---: | ---: |",
    (.[] | "| \(.scenario) | \(.layout | layout) | \(.insufficient_data) | "
      + (if .converge == [] then "no change"
         else [.converge[] | "\(.right // "either") at \(.at | t): \(.after_ms | t)"] | join(", ") end)
      + " | \(.wrong_answers) | \(.wrong_ms | t) |")' "$rows"
