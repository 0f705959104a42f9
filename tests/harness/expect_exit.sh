#!/bin/sh
# expect_exit.sh CODE REGEX [--also REGEX]... [--not REGEX]... -- COMMAND...
# Runs COMMAND and passes when it exits with CODE and its output (stdout + stderr) matches the
# extended regular expression REGEX and every --also, and matches no --not. For testing error
# paths: bad flags, failing ranks.
code=$1; regex=$2; shift 2
also=""; absent=""
nl='
'
while [ "$1" != "--" ]; do
  case "$1" in
    --also) also="$also$2$nl" ;;
    --not) absent="$absent$2$nl" ;;
    *) echo "expect_exit: unknown option $1 (--also REGEX, --not REGEX, then --)"; exit 2 ;;
  esac
  shift 2
done
shift
# A run that must exit 2 stops on a configuration error before step 1: every rank leaves through
# MPI_Finalize, after rank 0 has printed why. Open MPI's mpirun still gives the ranks of a job
# with a failed rank a grace before it kills them (odls_base_sigkill_timeout: 1 s, about 2 s of
# waiting in all) though none is left to kill; here there is nothing to wait for. Runs that fail
# later (exit 1: the other ranks write their traces while mpirun ends the job) keep the grace.
if [ "$code" -eq 2 ]; then export OMPI_MCA_odls_base_sigkill_timeout=0; fi
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$code" ]; then echo "expect_exit: exit code $rc, expected $code"; exit 1; fi
matches() { printf '%s\n' "$out" | grep -Eq -- "$1"; }
if ! matches "$regex"; then echo "expect_exit: output does not match /$regex/"; exit 1; fi
printf '%s' "$also" | while IFS= read -r r; do
  matches "$r" || { echo "expect_exit: output does not match /$r/"; exit 1; }
done || exit 1
printf '%s' "$absent" | while IFS= read -r r; do
  ! matches "$r" || { echo "expect_exit: output matches /$r/, which it must not"; exit 1; }
done || exit 1
echo "expect_exit: exit $rc and output as expected"
