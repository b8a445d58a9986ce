#!/usr/bin/env bash
# Runs the cargo-fuzz targets in fuzz/ one after another, FUZZ_SECONDS each
# (default 60), growing fuzz/corpus/<target>. Crashes are written to
# fuzz/artifacts/<target>/ and make the script exit non-zero after the rest
# have run.
#
#   scripts/fuzz.sh                     # every target, 60 s each
#   FUZZ_SECONDS=480 scripts/fuzz.sh cursor_decode strict_body
#   scripts/fuzz.sh cmin                # minimise every corpus afterwards
#
# Environment:
#   FUZZ_SECONDS     seconds per target (default 60)
#   FUZZ_SANITIZER   none (default; the targets are safe Rust) or address
#   CARGO_TARGET_DIR build directory (default /var/tmp/esim-fuzz-target, apart
#                    from the service's target/ so the two builds never wait
#                    on each other's lock)
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_SANITIZER=${FUZZ_SANITIZER:-none}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/esim-fuzz-target}
# cargo-fuzz passes nightly-only flags (sanitizer coverage); this lets the
# stable toolchain accept them.
export RUSTC_BOOTSTRAP=1

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

# The fuzz crate is its own workspace with its own lock file (not committed):
# start it from the service's, so the fuzzed code runs on the same versions.
if [[ ! -f fuzz/Cargo.lock ]]; then
    cp Cargo.lock fuzz/Cargo.lock
fi

cd fuzz
mode=run
if [[ ${1:-} == cmin ]]; then
    mode=cmin
    shift
fi
if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

# Release build with debug assertions and overflow checks on (cargo-fuzz's
# default without -O): an arithmetic overflow is a crash, as in a debug build.
fuzz=(--sanitizer "$FUZZ_SANITIZER" --target-dir "$CARGO_TARGET_DIR")
cargo fuzz build "${fuzz[@]}"

failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    if [[ $mode == cmin ]]; then
        echo "== cmin $target: $(ls "corpus/$target" | wc -l) inputs"
        # Set cover over edges only (no hit-count buckets): about a tenth of
        # a plain merge, with the same edges.
        nice -n 19 cargo fuzz cmin "${fuzz[@]}" "$target" -- \
            -set_cover_merge=1 -use_counters=0
        echo "== cmin $target: $(ls "corpus/$target" | wc -l) inputs left"
        continue
    fi
    echo "== $target for ${FUZZ_SECONDS}s"
    # nice: the fuzzer takes a core for the whole run.
    if ! nice -n 19 cargo fuzz run "${fuzz[@]}" "$target" -- \
        -max_total_time="$FUZZ_SECONDS" -print_final_stats=1; then
        failed+=("$target")
    fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "crashes in: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
