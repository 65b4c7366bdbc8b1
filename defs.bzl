"""Public Starlark API of the clonestage module.

Thin re-exports; the implementations live in private/ and may move.

    load("@clonestage//:defs.bzl", "clonestage_install")
"""

load("//private:install.bzl", _clonestage_install = "clonestage_install")

clonestage_install = _clonestage_install
