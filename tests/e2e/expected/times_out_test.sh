#!/bin/bash
# Sleeps far beyond the --test_timeout run.sh sets; never passes.
echo "sleeping past the timeout"
sleep 600
echo "not timed out" >&2
exit 1
