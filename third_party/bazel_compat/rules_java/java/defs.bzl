"""Offline stand-in for `@rules_java//java:defs.bzl` under Bazel 4.2.3.

Bazel 4.2.3's own `@bazel_tools` packages load this file, so it must exist
even for a C++-only build. The Java rules are still built into 4.2.3, so each
macro forwards to `native.<rule>` unchanged.
"""

def java_binary(**attrs):
    """Forwards to native.java_binary.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_binary(**attrs)  # buildifier: disable=native-java-binary

def java_import(**attrs):
    """Forwards to native.java_import.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_import(**attrs)  # buildifier: disable=native-java-import

def java_library(**attrs):
    """Forwards to native.java_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_library(**attrs)  # buildifier: disable=native-java-library

def java_lite_proto_library(**attrs):
    """Forwards to native.java_lite_proto_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_lite_proto_library(**attrs)  # buildifier: disable=native-java-lite-proto

def java_package_configuration(**attrs):
    """Forwards to native.java_package_configuration.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_package_configuration(**attrs)  # buildifier: disable=native-java-package-config

def java_plugin(**attrs):
    """Forwards to native.java_plugin.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_plugin(**attrs)  # buildifier: disable=native-java-plugin

def java_proto_library(**attrs):
    """Forwards to native.java_proto_library.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_proto_library(**attrs)  # buildifier: disable=native-java-proto

def java_runtime(**attrs):
    """Forwards to native.java_runtime.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_runtime(**attrs)  # buildifier: disable=native-java-runtime

def java_test(**attrs):
    """Forwards to native.java_test.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_test(**attrs)  # buildifier: disable=native-java-test

def java_toolchain(**attrs):
    """Forwards to native.java_toolchain.

    Args:
      **attrs: attributes of the native rule.
    """
    native.java_toolchain(**attrs)  # buildifier: disable=native-java-toolchain
