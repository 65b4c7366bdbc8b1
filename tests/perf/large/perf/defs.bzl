"""perf_library: one SwiftCompile-sized action per target.

The action (mnemonic `SwiftCompile`) runs //tools:compile over:
  - the SDK-like tree @perf_sdk//:sdk (1,540 files, ~287 MB), the same depset
    for every action;
  - `sources` generated source files (written by Bazel, no spawn) and the
    workspace's salt.txt, which ../large.sh rewrites to force new actions;
  - the module of every transitive dependency (1 MiB each): outputs feeding
    dependents.
It writes Name.module (1 MiB, read by dependents) and Name.o (512 KiB) into
the package's output directory. The compiler reads every input byte, then
spends `--define=perf_work_ms=N` (default 1000) milliseconds of CPU time
standing in for type-checking and code generation.
"""

def _pad(number, width):
    text = str(number)
    return "0" * (width - len(text)) + text

PerfModuleInfo = provider(
    doc = "A library's module and its dependencies' modules.",
    fields = {
        "module": "File: this library's module",
        "transitive": "depset of File: this module and every dependency's",
    },
)

def _perf_library_impl(ctx):
    name = ctx.label.name
    srcs = [ctx.file._salt]
    for i in range(ctx.attr.sources):
        src = ctx.actions.declare_file("%s.sources/%s%s.swift" % (name, name, _pad(i, 3)))
        ctx.actions.write(src, "// source %d of %s\npublic struct %sType%d { public var value = %d }\n" % (i, name, name, i, i))
        srcs.append(src)
    deps = [d[PerfModuleInfo] for d in ctx.attr.deps]
    modules = depset(transitive = [d.transitive for d in deps])
    sdk = ctx.attr._sdk[DefaultInfo].files

    module = ctx.actions.declare_file(name + ".module")
    obj = ctx.actions.declare_file(name + ".o")
    args = ctx.actions.args()
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    args.add("--module-name", name)
    args.add("--out-module", module)
    args.add("--out-object", obj)
    args.add("--work-ms", ctx.var.get("perf_work_ms", "1000"))
    args.add_all(srcs, before_each = "--in")
    args.add_all(modules, before_each = "--in")
    args.add_all(sdk, before_each = "--in")
    ctx.actions.run(
        executable = ctx.executable._compiler,
        arguments = [args],
        inputs = depset(srcs, transitive = [modules, sdk]),
        outputs = [module, obj],
        mnemonic = "SwiftCompile",
        progress_message = "Compiling module %s" % name,
    )
    return [
        DefaultInfo(files = depset([module, obj])),
        PerfModuleInfo(
            module = module,
            transitive = depset([module], transitive = [d.transitive for d in deps]),
        ),
    ]

perf_library = rule(
    implementation = _perf_library_impl,
    doc = "One SwiftCompile-sized action; see the file's docstring.",
    attrs = {
        "deps": attr.label_list(
            doc = "perf_library targets whose modules this one reads.",
            providers = [PerfModuleInfo],
        ),
        "sources": attr.int(
            doc = "How many generated source files the action reads.",
            default = 40,
        ),
        "_compiler": attr.label(
            default = "//tools:compile",
            executable = True,
            cfg = "exec",
        ),
        "_salt": attr.label(
            default = "//:salt.txt",
            allow_single_file = True,
        ),
        "_sdk": attr.label(default = "@perf_sdk//:sdk"),
    },
)

def _perf_compiler_impl(ctx):
    return [DefaultInfo(files = depset([ctx.executable._compiler]))]

perf_compiler = rule(
    implementation = _perf_compiler_impl,
    doc = """The compiler, built in the configuration perf_library's actions run it in.

Building this target builds exactly what the libraries' actions need, so
../large.sh can build the compiler untimed before a timed build.""",
    attrs = {
        "_compiler": attr.label(
            default = "//tools:compile",
            executable = True,
            cfg = "exec",
        ),
    },
)
