#!/usr/bin/env bash
# .ci/mutants.sh — guarantee mutants: each mutants/*.patch breaks one
# guarantee on purpose; the tests that guard it must then fail ("killed").
#
# For each patch: copy the working tree (without .git) to a temporary
# directory, `git apply` the patch there, check that it builds (go vet of
# the guarded packages), run its guard tests (`go test -count=1 -run`),
# and count it killed when a guard fails, survived when all pass. A patch
# that does not apply or does not build is reported by name and fails the
# run too: re-make it against the current code.
#
# Patch header (text before the first `diff --git`, ignored by git apply):
#   mutant: what it breaks
#   guard: <package> <-run regexp>     (one or more; run in order)
#   expect: <extended regexp>          the failure a kill must show: a
#                                       guard failing otherwise (a
#                                       timeout, a panic) is reported as
#                                       BROKEN, not killed
#   needs: kfake | broker              (broker: run only with
#                                       KDELAY_TEST_BROKERS set, i.e. in
#                                       .ci/run's real-broker tier)
# Guards of a kfake mutant run with KDELAY_TEST_BROKERS and
# KDELAY_KAFKA_CTL unset (integration tests then use their in-process
# kfake broker), without -race (the guards check behaviour, not races).
#
# Usage: bash .ci/mutants.sh [name-substring ...]   (default: all)
# KDELAY_MUTANT_JOBS (default 2) mutants run at a time, each in its own
# copy; their reports are printed in patch order once all have run.
# Prints one line per mutant and `N killed, M survived`; exit 0 only when
# every mutant applied, built and was killed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$PWD"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kdelay-mutants.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

T0=$SECONDS
JOBS="${KDELAY_MUTANT_JOBS:-2}"

# run_mutant PATCH: one mutant, start to end, in its own copy. Its report
# lines go to $WORK/NAME.out, its verdict (killed, survived, broken,
# skipped) to $WORK/NAME.verdict.
run_mutant() {
  local patch="$1" name desc needs expect by t1 dir pkgs g pkg run why
  name="$(basename "$patch" .patch)"
  exec >"$WORK/$name.out" 2>&1
  verdict() { echo "$1" >"$WORK/$name.verdict"; }
  desc="$(sed -n 's/^mutant: //p' "$patch" | head -1)"
  needs="$(sed -n 's/^needs: //p' "$patch" | head -1)"
  expect="$(sed -n 's/^expect: //p' "$patch" | head -1)"
  local -a guards envs
  mapfile -t guards < <(sed -n 's/^guard: //p' "$patch")
  if ((${#guards[@]} == 0)) || [[ -z "$expect" ]]; then
    echo "BROKEN   $name: no guard: or expect: line in the patch header"
    verdict broken; return
  fi
  envs=(env -u KDELAY_TEST_BROKERS -u KDELAY_KAFKA_CTL)
  if [[ "$needs" == broker ]]; then
    if [[ -z "${KDELAY_TEST_BROKERS:-}" ]]; then
      echo "SKIPPED  $name: needs a real broker (KDELAY_TEST_BROKERS unset)"
      verdict skipped; return
    fi
    envs=(env)
  fi

  dir="$WORK/$name"
  mkdir -p "$dir"
  tar -C "$ROOT" --exclude=./.git -cf - . | tar -C "$dir" -xf -
  if ! (cd "$dir" && git apply --whitespace=nowarn "$patch") >"$WORK/$name.apply" 2>&1; then
    echo "BROKEN   $name: PATCH DOES NOT APPLY to the current code (re-make mutants/$name.patch):"
    sed 's/^/           /' "$WORK/$name.apply"
    verdict broken; rm -rf "$dir"; return
  fi
  pkgs=()
  for g in "${guards[@]}"; do pkgs+=("${g%% *}"); done
  if ! (cd "$dir" && go vet "${pkgs[@]}") >"$WORK/$name.vet" 2>&1; then
    echo "BROKEN   $name: the mutated code does not build (re-make mutants/$name.patch):"
    sed 's/^/           /' "$WORK/$name.vet" | head -20
    verdict broken; rm -rf "$dir"; return
  fi

  by="" t1=$SECONDS
  for g in "${guards[@]}"; do
    pkg="${g%% *}" run="${g#* }"
    if ! (cd "$dir" && "${envs[@]}" go test -count=1 -timeout 4m -run "$run" "$pkg") >"$WORK/$name.log" 2>&1; then
      by="$pkg -run '$run'"
      break
    fi
    # a guard that ran nothing proves nothing
    if grep -q 'no tests to run' "$WORK/$name.log"; then
      echo "BROKEN   $name: guard $pkg -run '$run' matches no test"
      by="-"; break
    fi
  done
  if [[ "$by" == "-" ]]; then
    verdict broken
  elif [[ -n "$by" ]] && ! grep -qE "$expect" "$WORK/$name.log"; then
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

# Select, then run JOBS mutants at a time (KDELAY_MUTANT_JOBS, default 2:
# most guards wait on timeouts, not on the CPU); reports in patch order.
patches=()
for patch in "$ROOT"/mutants/*.patch; do
  name="$(basename "$patch" .patch)"
  if (($# > 0)); then
    want=0
    for a in "$@"; do [[ "$name" == *"$a"* ]] && want=1; done
    ((want)) || continue
  fi
  patches+=("$patch")
done
for patch in "${patches[@]}"; do
  while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
  run_mutant "$patch" &
done
wait

killed=0 survived=0 broken=0 skipped=0
broken_names=() survived_names=()
for patch in "${patches[@]}"; do
  name="$(basename "$patch" .patch)"
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
((broken > 0)) && echo "broken (did not apply, build, or match a test): ${broken_names[*]}"
((survived == 0 && broken == 0))
