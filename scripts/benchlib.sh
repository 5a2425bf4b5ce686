# Sourced by bench.sh and soak.sh, from the repository's root.

# wahook_bin sets WAHOOK_BIN: as given, or bin/wahook built from this tree.
wahook_bin() {
	mkdir -p bin
	if [ -z "${WAHOOK_BIN:-}" ]; then
		go build -o bin/wahook ./cmd/wahook
		WAHOOK_BIN=bin/wahook
	fi
}
# wait_http url: until it answers 2xx, 10 s at most.
wait_http() {
	for _ in $(seq 1 100); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.1; done
	echo "$(basename "$0"): $1 did not come up" >&2
	return 1
}
# proc_ticks pid: the process's CPU so far, user and system, in clock ticks.
proc_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
