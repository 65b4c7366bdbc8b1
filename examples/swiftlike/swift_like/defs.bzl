"""Public API of the example's SwiftCompile-like rules.

Thin re-exports: the implementations live in private/ and may move.
"""

load("//swift_like/private:exec_tools.bzl", _exec_tools = "exec_tools")
load("//swift_like/private:library.bzl", _swift_like_library = "swift_like_library")
load("//swift_like/private:manifest.bzl", _swift_like_manifest = "swift_like_manifest")
load("//swift_like/private:providers.bzl", _SwiftLikeInfo = "SwiftLikeInfo")

SwiftLikeInfo = _SwiftLikeInfo
exec_tools = _exec_tools
swift_like_library = _swift_like_library
swift_like_manifest = _swift_like_manifest
