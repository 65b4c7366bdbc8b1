"""Stand-ins for rules_swift's and apple_support's compile actions: one shell
action per target under the mnemonic the real rule uses (SwiftCompile,
ObjcCompile, ...), so that `--strategy=<Mnemonic>=...` lines route it as they
route the real one. No swiftc or clang runs here."""

def _compile_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".out")
    ctx.actions.run_shell(
        inputs = ctx.files.srcs,
        outputs = [out],
        command = "cat \"$@\" | sha256sum > {out} && echo {m} >> {out}".format(
            out = out.path,
            m = ctx.attr.mnemonic,
        ),
        arguments = [f.path for f in ctx.files.srcs],
        mnemonic = ctx.attr.mnemonic,
        progress_message = "%s %s (stand-in)" % (ctx.attr.mnemonic, ctx.label.name),
        # --action_env reaches the action, as it does rules_swift's: run.sh
        # gives each build its own value, so no build reuses another's results.
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]))]

mnemonic_compile = rule(
    implementation = _compile_impl,
    attrs = {
        "mnemonic": attr.string(mandatory = True),
        "srcs": attr.label_list(allow_files = True),
    },
)
