"""Jinja2 rendering of kernel templates over the hand-written primitives.

Templates live in templates/, primitives in kernels_src/; both folders are on the
loader path, so a template writes ``{% include "tma/tma_load.cuh" %}`` and the
rendered .cu is self-contained (one file to compile, cache and diff).
Undefined variables are errors, never empty strings.
"""

from __future__ import annotations

import functools

from porter import paths
from porter.errors import PorterError


@functools.lru_cache(maxsize=1)
def environment() -> "jinja2.Environment":  # noqa: F821
    import jinja2   # here, not at import: a GPU machine that only runs prepared cubins needs no jinja2

    loader = jinja2.FileSystemLoader([str(paths.data_dir("templates")),
                                      str(paths.data_dir("kernels_src"))])
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True,
                              lstrip_blocks=True)


def render(template_name: str, **context) -> str:
    """Render ``template_name`` with ``context``; template problems become PorterError."""
    import jinja2

    try:
        return environment().get_template(template_name).render(**context)
    except jinja2.TemplateNotFound as exc:
        raise PorterError(f"template {exc.name!r} not found in templates/ or kernels_src/") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise PorterError(f"{exc.filename or exc.name}:{exc.lineno}: template syntax error: {exc.message}") from exc
    except jinja2.UndefinedError as exc:
        raise PorterError(f"{template_name}: undefined template value: {exc.message}") from exc
