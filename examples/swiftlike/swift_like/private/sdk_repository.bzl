"""swiftlike_sdk: a repository rule that writes an SDK-like tree.

Real SwiftCompile actions read a large tree that is the same for every action
(SDK frameworks: headers, module maps, .swiftinterface and prebuilt
.swiftmodule files). This rule writes a deterministic stand-in once per output
base, at fetch time: no action builds it, `bazel clean` keeps it, and Bazel
treats it like any external source tree (hashes it once, uploads it to the
executor's CAS once).

Two parts, each a filegroup of the generated repository:
  :base  450 files, ~150 MB at scale "full": usr/include headers, 16
         frameworks, the Swift core modules. Every action reads it.
  :ui    1,490 files, ~314 MB at scale "full": 40 UI frameworks and
         resources. Only libraries with `ui = True` read it.
With sources and dependency modules, the example's 20 actions read a mean of
625 files / 183 MB and a p95 (the two UI actions) of 1,978 / 466 MB, the shape
of measured SwiftCompile actions (mean 635 files / 183 MB, p95 1,978 /
466 MB). Scale "ci" keeps every file count and shrinks the bytes to about 2 MB
in all, because staging costs per file far more than per byte.

File sizes are drawn from ranges per kind of file with a hash of the path, and
contents start with the path, so every file has its own digest, as in a real
SDK, and the tree is the same on every machine. MANIFEST in the repository
root gives the counts and bytes that were written.
"""

_BASE_FRAMEWORKS = [
    "Accelerate",
    "CFNetwork",
    "Combine",
    "CoreData",
    "CoreFoundation",
    "CoreGraphics",
    "CoreServices",
    "CoreText",
    "CryptoKit",
    "Dispatch",
    "Foundation",
    "Network",
    "OSLog",
    "Security",
    "SystemConfiguration",
    "UniformTypeIdentifiers",
]

_SWIFT_CORE_MODULES = [
    "Darwin",
    "Distributed",
    "ObjectiveC",
    "RegexBuilder",
    "Swift",
    "SwiftOnoneSupport",
    "_Concurrency",
    "_StringProcessing",
]

_UI_FRAMEWORKS = [
    "ARKit",
    "AVFoundation",
    "AVKit",
    "Accessibility",
    "AppIntents",
    "AuthenticationServices",
    "BackgroundTasks",
    "CallKit",
    "Charts",
    "Contacts",
    "ContactsUI",
    "CoreAnimation",
    "CoreHaptics",
    "CoreImage",
    "CoreLocation",
    "CoreML",
    "CoreMotion",
    "CoreSpotlight",
    "EventKit",
    "EventKitUI",
    "GameKit",
    "HealthKit",
    "LinkPresentation",
    "MapKit",
    "MediaPlayer",
    "MessageUI",
    "Metal",
    "MetalKit",
    "Photos",
    "PhotosUI",
    "QuartzCore",
    "QuickLook",
    "SafariServices",
    "SceneKit",
    "SpriteKit",
    "StoreKit",
    "SwiftUI",
    "UIKit",
    "UserNotifications",
    "WebKit",
]

# Size ranges [low, high) in bytes per kind of file, per scale.
_SIZES = {
    "ci": {
        "doc": (500, 1500),
        "header": (200, 1200),
        "interface": (2000, 6000),
        "modulemap": (100, 300),
        "module": (4000, 12000),
        "plist": (200, 400),
        "resource": (1000, 3000),
        "ui_module": (4000, 12000),
    },
    "full": {
        "doc": (100000, 300000),
        "header": (2000, 24000),
        "interface": (1000000, 4000000),
        "modulemap": (300, 900),
        "module": (3400000, 7400000),
        "plist": (1000, 2000),
        "resource": (500000, 1500000),
        "ui_module": (2800000, 6800000),
    },
}

_BASE_HEADERS = 58
_BASE_FRAMEWORK_HEADERS = 19
_UI_FRAMEWORK_HEADERS = 32
_UI_RESOURCES = 10
_ARCH = "arm64-apple-ios"

def _zero_pad(number, width):
    """Starlark has no %0Nd: pads `number` with zeros to `width` digits."""
    text = str(number)
    return "0" * (width - len(text)) + text

def _layout():
    """Returns [(part, path, kind)] for the whole tree."""
    files = []
    for i in range(_BASE_HEADERS):
        files.append(("base", "base/usr/include/sys%s.h" % _zero_pad(i, 2), "header"))
    for fw in _BASE_FRAMEWORKS:
        files.extend(_framework("base", fw, _BASE_FRAMEWORK_HEADERS, "module"))
    for mod in _SWIFT_CORE_MODULES:
        path = "base/usr/lib/swift/%s.swiftmodule/%s.swiftmodule" % (mod, _ARCH)
        files.append(("base", path, "interface"))
    for fw in _UI_FRAMEWORKS:
        files.extend(_framework("ui", fw, _UI_FRAMEWORK_HEADERS, "ui_module"))
    for i in range(_UI_RESOURCES):
        files.append(("ui", "ui/System/Library/CoreServices/Assets%s.car" % _zero_pad(i, 2), "resource"))
    return files

def _framework(part, name, headers, module_kind):
    root = "%s/System/Library/Frameworks/%s.framework" % (part, name)
    files = []
    for i in range(headers):
        files.append((part, "%s/Headers/%s%s.h" % (root, name, _zero_pad(i, 2)), "header"))
    files.append((part, root + "/Modules/module.modulemap", "modulemap"))
    swiftmodule = "%s/Modules/%s.swiftmodule/%s" % (root, name, _ARCH)
    files.append((part, swiftmodule + ".swiftinterface", "interface"))
    files.append((part, swiftmodule + ".swiftmodule", module_kind))
    files.append((part, swiftmodule + ".swiftdoc", "doc"))
    files.append((part, root + "/Info.plist", "plist"))
    return files

# 4 KiB of filler; repeated to reach each file's size.
_FILLER = ("/* swiftlike SDK filler: the bytes a real SDK file would hold. */\n" * 64)[:4096]

def _content(path, size):
    head = "// %s\n" % path
    if size <= len(head):
        return head[:size]
    body = size - len(head)
    return head + _FILLER * (body // len(_FILLER)) + _FILLER[:body % len(_FILLER)]

def _swiftlike_sdk_impl(rctx):
    scale = rctx.attr.scale
    sizes = _SIZES[scale]
    totals = {"base": [0, 0], "ui": [0, 0]}
    for part, path, kind in _layout():
        low, high = sizes[kind]
        size = low + hash(path) % (high - low)
        rctx.file(path, _content(path, size), executable = False)
        totals[part][0] += 1
        totals[part][1] += size
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("BUILD.bazel", """\
# Generated by swiftlike_sdk (scale "{scale}").
package(default_visibility = ["//visibility:public"])

filegroup(
    name = "base",
    srcs = glob(["base/**"]),
)

filegroup(
    name = "ui",
    srcs = glob(["ui/**"]),
)

exports_files(["MANIFEST"])
""".format(scale = scale))
    rctx.file("MANIFEST", "".join([
        "scale %s\n" % scale,
        "base files %d bytes %d\n" % (totals["base"][0], totals["base"][1]),
        "ui files %d bytes %d\n" % (totals["ui"][0], totals["ui"][1]),
    ]))

swiftlike_sdk = repository_rule(
    implementation = _swiftlike_sdk_impl,
    doc = "Writes the SDK-like tree described in this file's docstring.",
    attrs = {
        "scale": attr.string(
            doc = "\"full\" (real sizes) or \"ci\" (same file counts, ~2 MB).",
            default = "full",
            values = ["ci", "full"],
        ),
    },
)
