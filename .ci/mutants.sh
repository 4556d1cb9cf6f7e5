#!/usr/bin/env bash
# .ci/mutants.sh — guarantee mutants: each mutants/*.mutant breaks one
# guarantee on purpose; the tests that guard it must then fail ("killed").
#
# A mutant is anchored on code, not on line numbers or diff context: each
# edit names a file and an exact snippet that must occur there exactly
# once, and the text that replaces it (format: internal/mutant/mutant.go).
# Code may move, and comments around it change, without breaking it.
#
# Header lines of a mutant file:
#   mutant: what it breaks
#   guard: <package> <-run regexp>     (one or more; run in order)
#   expect: <extended regexp>          the failure a kill must show: a
#                                       guard failing otherwise (a
#                                       timeout, a panic) is reported as
#                                       BROKEN, not killed
#   needs: kfake | broker              (broker: run only with
#                                       KDELAY_TEST_BROKERS set, i.e. in
#                                       .ci/run's real-broker tier)
#
# The run, in three phases:
#   1. every selected mutant must parse and apply (each snippet found
#      exactly once in the current code), else BROKEN;
#   2. every distinct guard runs once on the clean tree and must pass: a
#      guard that already fails without the mutant proves nothing, and its
#      mutants are BROKEN, not killed; a guard that matches no test is
#      BROKEN too;
#   3. each mutant is applied to its own copy of the tree (without .git),
#      built (go vet of the guarded packages), and its guards run; killed
#      when a guard fails with the expected message, survived when all
#      pass.
# Guards of a kfake mutant run with KDELAY_TEST_BROKERS and
# KDELAY_KAFKA_CTL unset (integration tests then use their in-process
# kfake broker), without -race (the guards check behaviour, not races).
#
# Usage: bash .ci/mutants.sh [name-substring ...]   (default: all)
# KDELAY_MUTANT_JOBS (default 4) guards or mutants run at a time; reports
# are printed in mutant order once all have run. Prints one line per
# mutant and `N killed, M survived`; exit 0 only when every mutant
# applied, built, had passing guards on the clean tree and was killed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-mutants.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

T0=$SECONDS
JOBS="${KDELAY_MUTANT_JOBS:-4}"
MUTATE="$WORK/mutate"
if ! go build -o "$MUTATE" ./internal/mutant/mutate; then
  echo "mutants: cannot build internal/mutant/mutate"
  exit 1
fi

# throttle: wait until fewer than JOBS background jobs run.
throttle() { while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done; }

# guard_env NEEDS: the env(1) prefix its guards run under.
guard_env() {
  if [[ "$1" == broker ]]; then echo env; else echo env -u KDELAY_TEST_BROKERS -u KDELAY_KAFKA_CTL; fi
}

# ------------------------------------------------ 1. select and parse ----
mutants=()
for f in "$ROOT"/mutants/*.mutant; do
  name="$(basename "$f" .mutant)"
  if (($# > 0)); then
    want=0
    for a in "$@"; do [[ "$name" == *"$a"* ]] && want=1; done
    ((want)) || continue
  fi
  mutants+=("$name")
done
if ((${#mutants[@]} == 0)); then
  echo "mutants: none selected"
  exit 1
fi

declare -A NEEDS PRE    # PRE[name]: a verdict decided before phase 3
declare -A GUARDKEY     # "needs|pkg run" -> index of the clean-tree run
guardkeys=()
for name in "${mutants[@]}"; do
  f="$ROOT/mutants/$name.mutant"
  if ! "$MUTATE" -n -C "$ROOT" "$f" >"$WORK/$name.apply" 2>&1; then
    { echo "BROKEN   $name: DOES NOT APPLY to the current code (re-anchor mutants/$name.mutant):"
      sed 's/^/           /' "$WORK/$name.apply"; } >"$WORK/$name.out"
    PRE[$name]=broken; continue
  fi
  NEEDS[$name]="$("$MUTATE" -field needs "$f")"
  if [[ "${NEEDS[$name]}" == broker && -z "${KDELAY_TEST_BROKERS:-}" ]]; then
    echo "SKIPPED  $name: needs a real broker (KDELAY_TEST_BROKERS unset)" >"$WORK/$name.out"
    PRE[$name]=skipped; continue
  fi
  while IFS= read -r g; do
    key="${NEEDS[$name]}|$g"
    if [[ -z "${GUARDKEY[$key]:-}" ]]; then
      guardkeys+=("$key")
      GUARDKEY[$key]=${#guardkeys[@]}
    fi
  done < <("$MUTATE" -field guards "$f")
done

# ------------------------------------- 2. each guard on the clean tree ----
# clean_guard I KEY: run guard KEY on the clean tree; its exit status goes
# to $WORK/clean.I.rc, its output to $WORK/clean.I.log.
clean_guard() {
  local i="$1" key="$2" needs g pkg run rc
  needs="${key%%|*}" g="${key#*|}" pkg="${g%% *}" run="${g#* }"
  # shellcheck disable=SC2046
  (cd "$ROOT" && $(guard_env "$needs") go test -count=1 -timeout 4m -run "$run" "$pkg") >"$WORK/clean.$i.log" 2>&1
  rc=$?
  if ((rc == 0)) && grep -q 'no tests to run' "$WORK/clean.$i.log"; then rc=100; fi
  echo "$rc" >"$WORK/clean.$i.rc"
}
t_clean=$SECONDS
for key in "${guardkeys[@]}"; do
  throttle
  clean_guard "${GUARDKEY[$key]}" "$key" &
done
wait
echo "mutants: ${#guardkeys[@]} distinct guards run on the clean tree in $((SECONDS - t_clean))s"
for name in "${mutants[@]}"; do
  [[ -n "${PRE[$name]:-}" ]] && continue
  while IFS= read -r g; do
    key="${NEEDS[$name]}|$g"
    i="${GUARDKEY[$key]}"
    rc="$(cat "$WORK/clean.$i.rc" 2>/dev/null || echo 1)"
    ((rc == 0)) && continue
    if ((rc == 100)); then
      echo "BROKEN   $name: guard ${g%% *} -run '${g#* }' matches no test" >"$WORK/$name.out"
    else
      { echo "BROKEN   $name: guard ${g%% *} -run '${g#* }' FAILS ON THE CLEAN TREE (fix the test or the code first; last lines):"
        tail -15 "$WORK/clean.$i.log" | cut -c1-200 | sed 's/^/           /'; } >"$WORK/$name.out"
    fi
    PRE[$name]=broken
    break
  done < <("$MUTATE" -field guards "$ROOT/mutants/$name.mutant")
done

# ------------------------------------------------ 3. each mutant -------
# run_mutant NAME: one mutant in its own copy. Its report lines go to
# $WORK/NAME.out, its verdict (killed, survived, broken) to
# $WORK/NAME.verdict.
run_mutant() {
  local name="$1" f desc expect by t1 dir pkgs g pkg run why
  f="$ROOT/mutants/$name.mutant"
  exec >"$WORK/$name.out" 2>&1
  verdict() { echo "$1" >"$WORK/$name.verdict"; }
  desc="$("$MUTATE" -field desc "$f")"
  expect="$("$MUTATE" -field expect "$f")"
  local -a guards
  mapfile -t guards < <("$MUTATE" -field guards "$f")

  dir="$WORK/$name"
  mkdir -p "$dir"
  tar -C "$ROOT" --exclude=./.git -cf - . | tar -C "$dir" -xf -
  if ! "$MUTATE" -C "$dir" "$f" >"$WORK/$name.apply" 2>&1; then
    echo "BROKEN   $name: DOES NOT APPLY (re-anchor mutants/$name.mutant):"
    sed 's/^/           /' "$WORK/$name.apply"
    verdict broken; rm -rf "$dir"; return
  fi
  pkgs=()
  for g in "${guards[@]}"; do pkgs+=("${g%% *}"); done
  if ! (cd "$dir" && go vet "${pkgs[@]}") >"$WORK/$name.vet" 2>&1; then
    echo "BROKEN   $name: the mutated code does not build (fix mutants/$name.mutant):"
    sed 's/^/           /' "$WORK/$name.vet" | head -20
    verdict broken; rm -rf "$dir"; return
  fi

  by="" t1=$SECONDS
  for g in "${guards[@]}"; do
    pkg="${g%% *}" run="${g#* }"
    # shellcheck disable=SC2046
    if ! (cd "$dir" && $(guard_env "${NEEDS[$name]}") go test -count=1 -timeout 4m -run "$run" "$pkg") >"$WORK/$name.log" 2>&1; then
      by="$pkg -run '$run'"
      break
    fi
  done
  if [[ -n "$by" ]] && ! grep -qE "$expect" "$WORK/$name.log"; then
    echo "BROKEN   $name: $by failed, but without the expected /$expect/ (last lines):"
    tail -15 "$WORK/$name.log" | cut -c1-200 | sed 's/^/           /'
    verdict broken
  elif [[ -n "$by" ]]; then
    why="$(grep -m1 -E "$expect" "$WORK/$name.log" | sed 's/^\s*//' | cut -c1-200)"
    echo "KILLED   $name ($((SECONDS - t1))s) by $by: $desc"
    echo "           $why"
    verdict killed
  else
    echo "SURVIVED $name ($((SECONDS - t1))s): $desc; guards passed: ${guards[*]}"
    verdict survived
  fi
  rm -rf "$dir"
}

for name in "${mutants[@]}"; do
  if [[ -n "${PRE[$name]:-}" ]]; then
    echo "${PRE[$name]}" >"$WORK/$name.verdict"
    continue
  fi
  throttle
  run_mutant "$name" &
done
wait

killed=0 survived=0 broken=0 skipped=0
broken_names=() survived_names=()
for name in "${mutants[@]}"; do
  cat "$WORK/$name.out" 2>/dev/null
  v="$(cat "$WORK/$name.verdict" 2>/dev/null || echo broken)"
  case "$v" in
  killed) killed=$((killed + 1)) ;;
  survived) survived=$((survived + 1)); survived_names+=("$name") ;;
  skipped) skipped=$((skipped + 1)) ;;
  *) broken=$((broken + 1)); broken_names+=("$name") ;;
  esac
done

echo
echo "mutants: $killed killed, $survived survived ($broken broken, $skipped skipped) in $((SECONDS - T0))s"
echo "$killed killed, $survived survived"
((survived > 0)) && echo "survived: ${survived_names[*]}"
((broken > 0)) && echo "broken (did not apply, build, pass on the clean tree, or match a test): ${broken_names[*]}"
((survived == 0 && broken == 0))
