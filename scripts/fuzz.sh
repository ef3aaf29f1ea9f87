#!/usr/bin/env bash
# scripts/fuzz.sh PKG TARGET FUZZTIME runs one fuzz target and exits with its
# result. Go's coordinator can wait forever once a count-based -fuzztime (3000x)
# has run its last input: the workers are gone and it prints "execs: N (0/sec)"
# every 3 s (golang/go#51484). A wall-clock -fuzztime has its own coordinator
# race (a deadline reported as a failure), so the count stays and the stall is
# recognised instead: when the count is reached, nothing failed and nothing is
# being minimised, the last two reports at 0/sec end the run as a pass. Any
# other run longer than 5 minutes is a failure.
set -u
pkg=$1 target=$2 fuzztime=$3
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

setsid "$go" test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >"$log" 2>&1 &
pid=$!

stop() { kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null; sleep 2; kill -KILL -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }

want=0
case $fuzztime in *x) want=${fuzztime%x} ;; esac
deadline=$((SECONDS + 300))
while kill -0 "$pid" 2>/dev/null; do
	sleep 1
	stalled=0
	if [ "$want" -gt 0 ] && ! grep -qE -- '--- FAIL|minimizing|failure while' "$log"; then
		stalled=1
		while read -r line; do
			if ! [[ $line =~ execs:\ ([0-9]+)\ \(0/sec\) ]] || [ "${BASH_REMATCH[1]}" -lt "$want" ]; then
				stalled=0
			fi
		done < <(grep -E '^fuzz: elapsed' "$log" | tail -n 2)
		[ "$(grep -cE '^fuzz: elapsed' "$log")" -ge 2 ] || stalled=0
	fi
	if [ "$stalled" = 1 ]; then
		stop
		cat "$log"
		echo "fuzz: $target ran its $want inputs without a failure; Go's coordinator then stalled (golang/go#51484) and was stopped"
		exit 0
	fi
	if [ "$SECONDS" -ge "$deadline" ]; then
		stop
		cat "$log"
		echo "fuzz: $target still running after 5 minutes: stopped, counted as a failure"
		exit 1
	fi
done
wait "$pid"
rc=$?
cat "$log"
exit "$rc"
