#!/bin/bash
# Runs check_staged.sh over this test's runfiles (cwd: the workspace's runfiles
# dir), then checks the report that //staged:check wrote.
set -eu
staged/check_staged.sh -- staged/check_staged.sh staged/data.txt gen/hello.txt staged/check_report.txt
report=staged/check_report.txt
grep -q '^input file [0-7]* staged/data.txt$' "$report" || {
  echo "FAIL: $report does not list staged/data.txt as a file:" >&2
  cat "$report" >&2
  exit 1
}
if [ "${CLONESTAGE_EXPECT_STAGED:-0}" = 1 ]; then
  grep -q '^staged: [0-9]* input(s) checked$' "$report" || {
    echo "FAIL: //staged:check did not run its checks (was it built with --config=staged?):" >&2
    cat "$report" >&2
    exit 1
  }
fi
cat "$report"
