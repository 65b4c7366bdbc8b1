"""Providers of the swift_like rules."""

SwiftLikeInfo = provider(
    doc = "What a swift_like_library gives its dependents and the module checker.",
    fields = {
        "manifest_lines": "depset of strings: one `lib ...` line per library in the " +
                          "transitive closure, the module checker's expectations.",
        "module": "File: this library's .swiftmodule-like output.",
        "module_name": "string: the module's name, as dependents import it.",
        "transitive_modules": "depset of Files: the modules of all transitive " +
                              "dependencies (not this one), which a compile needs to " +
                              "resolve imports.",
    },
)
