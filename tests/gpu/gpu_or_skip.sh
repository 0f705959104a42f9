#!/bin/sh
# gpu_or_skip.sh COMMAND...
# Runs a chapter with --device cuda. Where no GPU is visible the chapter exits 2 saying
# "--device cuda: not available (why)": then this prints "skipped: why" and exits 77, which ctest
# counts as skipped (SKIP_RETURN_CODE), never as passed. Anything else passes through unchanged.
# Without a GPU every rank exits 2 through MPI_Finalize at once: mpirun's grace for ranks still
# running after one failed (tests/harness/expect_exit.sh) has none to wait for. On a GPU it
# would only shorten a failing run's end, which fails the test either way.
export OMPI_MCA_odls_base_sigkill_timeout=0
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 2 ] && printf '%s\n' "$out" | grep -q -- "--device cuda: not available"; then
  echo "skipped: $(printf '%s\n' "$out" | grep -o -- '--device cuda: not available.*' | head -1)"
  exit 77
fi
exit "$rc"
