"""Offline stand-in for `@rules_shell//shell:sh_test.bzl` under Bazel 4.2.3.

The e2e BUILD files load `sh_test` the way Bazel 8 requires (from rules_shell);
Bazel 4.2.3 has the rule built in and no rules_shell, so this forwards to it.
"""

def sh_test(**attrs):
    """Forwards to native.sh_test.

    Args:
      **attrs: attributes of the native rule.
    """
    native.sh_test(**attrs)  # buildifier: disable=native-sh-test
