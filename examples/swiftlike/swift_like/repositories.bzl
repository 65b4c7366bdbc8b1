"""WORKSPACE setup of the example's generated SDK trees (Bazel 4.2.3 to 6).

Bazel 7/8 with bzlmod use extensions.bzl instead.
"""

load("//swift_like/private:sdk_repository.bzl", "swiftlike_sdk")
load("//swift_like/private:xcode_repository.bzl", "swiftlike_xcode")

def swiftlike_sdk_repositories():
    """Declares @swiftlike_sdk_full, @swiftlike_sdk_ci and @swiftlike_xcode.

    Repositories are fetched only when a build needs them: //sdk selects one
    of the two by --//:scale, so a CI build never writes the full-size tree.
    """
    swiftlike_sdk(name = "swiftlike_sdk_full", scale = "full")
    swiftlike_sdk(name = "swiftlike_sdk_ci", scale = "ci")
    swiftlike_xcode(name = "swiftlike_xcode")
