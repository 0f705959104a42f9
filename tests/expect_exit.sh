#!/bin/sh
# expect_exit.sh CODE REGEX -- COMMAND...
# Runs COMMAND and passes when it exits with CODE and its output (stdout + stderr) matches the
# extended regular expression REGEX. For testing error paths: bad flags, failing ranks.
code=$1; regex=$2; shift 3
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -ne "$code" ]; then echo "expect_exit: exit code $rc, expected $code"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq -- "$regex"; then echo "expect_exit: output does not match /$regex/"; exit 1; fi
echo "expect_exit: exit $rc and output as expected"
