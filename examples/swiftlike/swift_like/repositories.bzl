"""WORKSPACE setup of the example's generated SDK trees (Bazel 4.2.3 to 6).

Bazel 7/8 with bzlmod use extensions.bzl instead.
"""

load("//swift_like/private:sdk_repository.bzl", "swiftlike_sdk")

def swiftlike_sdk_repositories():
    """Declares @swiftlike_sdk_full and @swiftlike_sdk_ci.

    Repositories are fetched only when a build needs them: //sdk selects one
    of the two by --//:scale, so a CI build never writes the full-size tree.
    """
    swiftlike_sdk(name = "swiftlike_sdk_full", scale = "full")
    swiftlike_sdk(name = "swiftlike_sdk_ci", scale = "ci")
