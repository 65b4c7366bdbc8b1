"""Offline stand-in for `@rules_cc//cc:defs.bzl` under Bazel 4.2.3.

`cc/BUILD.bazel` loads real rules_cc so that the same file works on Bazel 7/8
with bzlmod, and Bazel 4.2.3's own `@bazel_tools` packages load it too. The
C++ rules are still built into 4.2.3, so each macro here forwards to
`native.<rule>` unchanged. It provides the rules this project and
`@bazel_tools` load; add more the same way if needed.
"""

def cc_binary(**attrs):
    """Forwards to native.cc_binary.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_binary(**attrs)  # buildifier: disable=native-cc-binary

def cc_import(**attrs):
    """Forwards to native.cc_import.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_import(**attrs)  # buildifier: disable=native-cc-import

def cc_library(**attrs):
    """Forwards to native.cc_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_library(**attrs)  # buildifier: disable=native-cc-library

def cc_proto_library(**attrs):
    """Forwards to native.cc_proto_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_proto_library(**attrs)  # buildifier: disable=native-cc-proto

def cc_test(**attrs):
    """Forwards to native.cc_test.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_test(**attrs)  # buildifier: disable=native-cc-test

def cc_toolchain(**attrs):
    """Forwards to native.cc_toolchain.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_toolchain(**attrs)  # buildifier: disable=native-cc-toolchain

def cc_toolchain_suite(**attrs):
    """Forwards to native.cc_toolchain_suite.

    Args:
      **attrs: attributes of the native rule.
    """
    native.cc_toolchain_suite(**attrs)  # buildifier: disable=native-cc-toolchain-suite

def objc_library(**attrs):
    """Forwards to native.objc_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.objc_library(**attrs)  # buildifier: disable=native-cc-objc-library
