#!/bin/bash
# Writes two undeclared outputs, one in a subdirectory.
set -eu
: "${TEST_UNDECLARED_OUTPUTS_DIR:?Bazel sets TEST_UNDECLARED_OUTPUTS_DIR for tests}"
echo "clonestage-e2e undeclared output" > "$TEST_UNDECLARED_OUTPUTS_DIR/report.txt"
mkdir -p "$TEST_UNDECLARED_OUTPUTS_DIR/sub"
echo nested > "$TEST_UNDECLARED_OUTPUTS_DIR/sub/nested.txt"
echo "wrote undeclared outputs to $TEST_UNDECLARED_OUTPUTS_DIR"
