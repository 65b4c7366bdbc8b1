"""swift_like_library: a rule whose one action is shaped like rules_swift's SwiftCompile.

Each library runs //compiler:swiftc_like once, with mnemonic `SwiftCompile`,
over:
  - its sources (checked-in `srcs` plus `synthetic_srcs` generated ones),
  - the .swiftmodule of every transitive dependency (a compile needs them all
    to resolve imports), which puts dependency outputs into dependents' inputs,
  - the SDK-like tree of //sdk:base, shared by every action, and //sdk:ui for
    libraries with `ui = True` (the large UI frameworks few libraries import).
It writes Name.swiftmodule, Name.swiftdoc and Name.o into the package's output
directory, which also holds the modules of same-package dependencies: the
action's output directory contains some of its inputs, as in real builds.

The SDK files come in as the filegroup's own depset, the same object for every
action, so Bazel 5+ with --experimental_remote_merkle_tree_cache builds that
subtree's Merkle tree once per build.

The arguments go through a params file (`@file`), as SwiftCompile's do: with
~2,000 inputs the command line would be long, and under remote execution the
params file becomes one more staged input.

Implicit modules, as rules_swift sets them up with its default feature
`swift.use_global_module_cache` (docs/module-cache.md cites the lines): the
compiler gets `--module-cache-path <bin_dir>/_swift_module_cache`, a directory
no action declares, and imports `implicit_imports` (system modules of the
stand-in SDK, @swiftlike_xcode, outside every action's inputs) and
`c_modules` (workspace modules whose module maps are inputs) through it. Each
module costs `--define=swiftlike_module_ms=N` (default 150) CPU ms to build;
`Name.modcache` lists, per module, whether this compile loaded, built or
waited for it. The action runs the compiler through //compiler:worker_like,
as rules_swift runs swiftc through its worker: two executed inputs.
`--define=swiftlike_work_ms=N` (default 0) adds type-checking CPU time.
"""

load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")
load("@swiftlike_xcode//:sdkroot.bzl", "SDKROOT")
load(":providers.bzl", "SwiftLikeInfo")

# Bytes the module file is padded to, per --//:scale. Object files get half.
_MODULE_PAD = {
    "ci": 1024,
    "full": 262144,
}

def _zero_pad(number, width):
    """Starlark has no %0Nd: pads `number` with zeros to `width` digits."""
    text = str(number)
    return "0" * (width - len(text)) + text

def _synthetic_source(module_name, index):
    lines = ["// Generated source %d of module %s." % (index, module_name)]
    lines.append("import Foundation")
    lines.append("")
    lines.append("public struct %sType%s {" % (module_name, _zero_pad(index, 3)))
    for field in range(24):
        lines.append("    public var field%s: Int = %d" % (_zero_pad(field, 2), index * 100 + field))
    lines.append("    public init() {}")
    lines.append("}")
    return "\n".join(lines) + "\n"

def _swift_like_library_impl(ctx):
    module_name = ctx.attr.module_name or ctx.label.name
    scale = ctx.attr._scale[BuildSettingInfo].value
    if scale not in _MODULE_PAD:
        fail("--//:scale must be one of %s, not %r" % (sorted(_MODULE_PAD.keys()), scale))

    srcs = list(ctx.files.srcs)
    for i in range(ctx.attr.synthetic_srcs):
        src = ctx.actions.declare_file("%s.sources/%s%s.swift" % (ctx.label.name, module_name, _zero_pad(i, 3)))
        ctx.actions.write(src, _synthetic_source(module_name, i))
        srcs.append(src)

    deps = [dep[SwiftLikeInfo] for dep in ctx.attr.deps]
    transitive_modules = depset(
        direct = [dep.module for dep in deps],
        transitive = [dep.transitive_modules for dep in deps],
    )
    sdk_sets = [ctx.attr._sdk_base[DefaultInfo].files]
    if ctx.attr.ui:
        sdk_sets.append(ctx.attr._sdk_ui[DefaultInfo].files)

    module = ctx.actions.declare_file(module_name + ".swiftmodule")
    doc = ctx.actions.declare_file(module_name + ".swiftdoc")
    obj = ctx.actions.declare_file(module_name + ".o")
    report = ctx.actions.declare_file(module_name + ".modcache")
    c_module_files = []

    args = ctx.actions.args()
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    args.add("--module-name", module_name)
    args.add("--emit-module", module)
    args.add("--emit-doc", doc)
    args.add("--emit-object", obj)
    args.add("--module-pad", str(_MODULE_PAD[scale]))
    args.add_all(srcs, before_each = "--src")
    for dep in deps:
        args.add("--import")
        args.add(dep.module_name)
        args.add(dep.module)
    args.add_all(transitive_modules, before_each = "--module")
    for sdk in sdk_sets:
        args.add_all(sdk, before_each = "--sdk")

    # rules_swift: `-module-cache-path <bin_dir>/_swift_module_cache`.
    args.add("--module-cache-path", ctx.bin_dir.path + "/_swift_module_cache")
    args.add("--sdkroot", SDKROOT)
    imports = list(ctx.attr.implicit_imports)
    if ctx.attr.ui and "SwiftUI" not in imports:
        imports.append("SwiftUI")  # UI libraries import SwiftUI (and so UIKit, Combine)
    args.add_all(imports, before_each = "--implicit-import")
    for target, name in ctx.attr.c_modules.items():
        maps = [f for f in target.files.to_list() if f.basename == "module.modulemap"]
        if len(maps) != 1:
            fail("c_modules: %s must hold exactly one module.modulemap" % target.label)
        args.add("--clang-module", "%s=%s" % (name, maps[0].path))
        c_module_files.append(target.files)
    args.add("--implicit-module-ms", ctx.var.get("swiftlike_module_ms", "150"))
    args.add("--work-ms", ctx.var.get("swiftlike_work_ms", "0"))
    args.add("--modcache-report", report)

    # The worker runs the compiler: both are executed inputs, as in rules_swift.
    worker_args = ctx.actions.args()
    worker_args.add(ctx.executable._compiler)
    ctx.actions.run(
        executable = ctx.executable._worker,
        tools = [ctx.attr._compiler[DefaultInfo].files_to_run],
        arguments = [worker_args, args],
        inputs = depset(srcs, transitive = [transitive_modules] + sdk_sets + c_module_files),
        outputs = [module, doc, obj, report],
        mnemonic = "SwiftCompile",
        progress_message = "Compiling Swift module %s" % module_name,
        # --action_env reaches the compiler (CLONESTAGE_EXPECT_STAGED).
        use_default_shell_env = True,
    )

    # What the compiler must report having read: the checker compares it.
    expected_inputs = len(srcs) + len(transitive_modules.to_list())
    for sdk in sdk_sets:
        expected_inputs += len(sdk.to_list())
    line = "lib %s %s %d" % (module_name, module.short_path, expected_inputs)
    for dep in deps:
        line += " %s=%s" % (dep.module_name, dep.module.short_path)

    return [
        DefaultInfo(files = depset([module, doc, obj, report])),
        SwiftLikeInfo(
            manifest_lines = depset([line], transitive = [dep.manifest_lines for dep in deps]),
            module = module,
            module_name = module_name,
            transitive_modules = transitive_modules,
        ),
    ]

swift_like_library = rule(
    implementation = _swift_like_library_impl,
    doc = "A library compiled by one SwiftCompile-like action; see the file's docstring.",
    attrs = {
        "c_modules": attr.label_keyed_string_dict(
            doc = "Workspace C modules this library imports: a target holding one " +
                  "module.modulemap (and its headers), keyed to the module's name.",
            allow_files = True,
        ),
        "deps": attr.label_list(
            doc = "swift_like_library targets this module imports.",
            providers = [SwiftLikeInfo],
        ),
        "implicit_imports": attr.string_list(
            doc = "System modules of the stand-in SDK the sources import.",
            default = ["Foundation"],
        ),
        "module_name": attr.string(
            doc = "The module's name; defaults to the target's name.",
        ),
        "srcs": attr.label_list(
            doc = "Checked-in sources.",
            allow_files = [".swift"],
        ),
        "synthetic_srcs": attr.int(
            doc = "How many more sources to generate (file writes, no spawn).",
            default = 0,
        ),
        "ui": attr.bool(
            doc = "Also read the large UI part of the SDK, as UI modules do.",
            default = False,
        ),
        "_compiler": attr.label(
            default = "//compiler:swiftc_like",
            executable = True,
            cfg = "exec",
        ),
        "_scale": attr.label(default = "//:scale"),
        "_worker": attr.label(
            default = "//compiler:worker_like",
            executable = True,
            cfg = "exec",
        ),
        "_sdk_base": attr.label(default = "//sdk:base"),
        "_sdk_ui": attr.label(default = "//sdk:ui"),
    },
)
