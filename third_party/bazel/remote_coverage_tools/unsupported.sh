#!/bin/sh
echo "error: coverage is not supported by this offline Bazel set-up" \
     "(third_party/bazel/remote_coverage_tools); use bazel test" >&2
exit 1
