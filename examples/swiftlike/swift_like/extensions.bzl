"""bzlmod module extension declaring the example's generated SDK trees.

MODULE.bazel: `use_repo(use_extension("//swift_like:extensions.bzl", "swiftlike_sdk"),
"swiftlike_sdk_ci", "swiftlike_sdk_full", "swiftlike_xcode")`. WORKSPACE builds use
repositories.bzl; Bazel 4.2.3 never loads this file.
"""

load("//swift_like/private:sdk_repository.bzl", _swiftlike_sdk_repo = "swiftlike_sdk")
load("//swift_like/private:xcode_repository.bzl", _swiftlike_xcode_repo = "swiftlike_xcode")

def _swiftlike_sdk_extension_impl(_module_ctx):
    _swiftlike_sdk_repo(name = "swiftlike_sdk_full", scale = "full")
    _swiftlike_sdk_repo(name = "swiftlike_sdk_ci", scale = "ci")
    _swiftlike_xcode_repo(name = "swiftlike_xcode")

swiftlike_sdk = module_extension(
    implementation = _swiftlike_sdk_extension_impl,
    doc = "Declares @swiftlike_sdk_full, @swiftlike_sdk_ci and @swiftlike_xcode (private/).",
)
