"""The bundle's shared templates (``templates/``: the loading snippets and the README) and what each
backend writes into them: its ``bundle_templates`` (slot -> a Jinja template in its package folder),
loaded as ``<backend>/<path>`` and included with the shared template's context. A shared template
asks for a slot and gets the fragments of the backends concerned, in registry order; it never names
a backend. A fragment that is a phrase of a shared sentence is included inside ``{% filter trim %}``,
so its file may end in a newline.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from edgeship.backends.registry import SPECS, package_folder

if TYPE_CHECKING:
    import jinja2


def fragment(slot: str, backend: str) -> str:
    """The template name of ``backend``'s fragment for ``slot`` (RuntimeError when it declares none: a
    backend whose artifacts go into a platform writes that platform's per-artifact slots)."""
    source = SPECS[backend].bundle_templates.get(slot)
    if source is None:
        raise RuntimeError(f"backend {backend} declares no bundle template for {slot!r} (its spec's "
                           "bundle_templates); its artifacts cannot be written into this bundle's files")
    return f"{backend}/{source}"


def fragments(slot: str, backends: Iterable[str]) -> list[str]:
    """The template names of the fragments ``backends`` declare for ``slot``, in registry order."""
    present = set(backends)
    return [f"{name}/{spec.bundle_templates[slot]}" for name, spec in SPECS.items()
            if name in present and slot in spec.bundle_templates]


def environment(finalize: Callable[[object], object] | None = None) -> jinja2.Environment:
    """The Jinja environment of the shared templates and the backends' fragments, with
    ``fragment`` and ``fragments`` as globals. ``finalize``: what every value goes through."""
    import jinja2

    backends = {name: jinja2.FileSystemLoader(package_folder(name)) for name in SPECS if SPECS[name].bundle_templates}
    loader = jinja2.ChoiceLoader([jinja2.PackageLoader("edgeship.bundle", "templates"),
                                  jinja2.PrefixLoader({"x86_app": jinja2.PackageLoader("edgeship.bundle", "x86_app")}),
                                  jinja2.PrefixLoader(backends)])
    env = jinja2.Environment(loader=loader, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False, finalize=finalize)
    env.globals.update(fragment=fragment, fragments=fragments)
    return env
