"""Offline stand-in for `@rules_rust//rust:defs.bzl` under Bazel 4.2.3.

rust/BUILD.bazel builds the clonestage helper with rules_rust for bzlmod users
(Bazel 7+). Bazel 4.2.3 has no rules_rust, yet the root workspace must load
every package for `bazel build //...` and `bazel query //...`, and rust/ must
not be hidden (.bazelignore is applied to the module when it is a dependency).
So each rule here declares a `manual` target that, if built on purpose, fails
with the reason instead of building anything. On Bazel 4.2.3 the helper is
built with cargo (tools/install-binaries.sh).
"""

_MESSAGE = ("{label}: rules_rust is not available under Bazel 4.2.3 (WORKSPACE mode); " +
            "build the clonestage helper with cargo (tools/install-binaries.sh), " +
            "or use Bazel 7+ with bzlmod")

def _unavailable(name, visibility = None, testonly = None, **_ignored):
    native.genrule(
        name = name,
        outs = [name + ".rules_rust_unavailable"],
        cmd = "echo '%s' >&2; exit 1" % _MESSAGE.format(label = "//" + native.package_name() + ":" + name),
        tags = ["manual"],
        testonly = testonly,
        visibility = visibility,
    )

def rust_binary(name, **attrs):
    """A manual target that fails with the reason rules_rust is missing.

    Args:
      name: target name.
      **attrs: rules_rust attributes (visibility and testonly are kept).
    """
    _unavailable(name, **attrs)

def rust_library(name, **attrs):
    """A manual target that fails with the reason rules_rust is missing.

    Args:
      name: target name.
      **attrs: rules_rust attributes (visibility and testonly are kept).
    """
    _unavailable(name, **attrs)

def rust_test(name, **attrs):
    """A manual target that fails with the reason rules_rust is missing.

    Args:
      name: target name.
      **attrs: rules_rust attributes (visibility and testonly are kept).
    """
    _unavailable(name, **attrs)
