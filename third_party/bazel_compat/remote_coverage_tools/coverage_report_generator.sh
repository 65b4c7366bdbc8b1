#!/bin/sh
# Offline stand-in for Bazel's coverage report generator (see ../README.md).
# Coverage is not supported in the offline Bazel 4.2.3 workspace.
echo "remote_coverage_tools stand-in: coverage reports are not available offline" >&2
exit 1
