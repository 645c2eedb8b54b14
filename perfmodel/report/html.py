"""A self-contained HTML page: inline CSS, images as base64 data URIs, no external URL."""

from __future__ import annotations

import base64
from html import escape
from typing import Iterable

CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0;
       color: #222; background: #fff; font-size: 14px; line-height: 1.45; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 20px 0 6px; }
nav { font-size: 13px; margin: 6px 0 12px; }
nav a { margin-right: 14px; color: #1f5fa8; text-decoration: none; }
p.meta, p.note { color: #555; font-size: 13px; margin: 4px 0 10px; }
p.empty { color: #8a5a00; background: #fff7e6; padding: 6px 10px; border-radius: 4px; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0 14px; }
th, td { padding: 3px 9px; border-bottom: 1px solid #eee; text-align: right;
         white-space: nowrap; }
th { background: #f4f6f8; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
tr.fail td { background: #fdecea; }
td.fail { color: #b00020; font-weight: 600; }
td.ok { color: #1b7a3a; }
ul.warnings { color: #8a5a00; font-size: 12.5px; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0 18px;
      border: 1px solid #eee; }
"""


def page(title: str, meta: str, sections: list[tuple[str, str, str]]) -> str:
    """The whole page: ``sections`` are (id, heading, inner HTML)."""
    nav = " ".join(f'<a href="#{sid}">{escape(heading)}</a>' for sid, heading, _ in sections)
    body = "\n".join(f'<section id="{sid}">\n<h2>{escape(heading)}</h2>\n{inner}\n</section>'
                     for sid, heading, inner in sections)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
            f"<h1>{escape(title)}</h1>\n<p class=\"meta\">{escape(meta)}</p>\n"
            f"<nav>{nav}</nav>\n{body}\n</main>\n</body>\n</html>\n")


def image(png: bytes, alt: str) -> str:
    """An ``<img>`` holding ``png`` as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{escape(alt)}">'


def table(headers: list[str], rows: Iterable[list], text_columns: int = 1,
          row_classes: Iterable[str] | None = None) -> str:
    """A table; the first ``text_columns`` columns are left-aligned. A cell is a
    value or a ``(value, css class)`` pair."""
    def cell(tag: str, value, index: int) -> str:
        value, css = value if isinstance(value, tuple) else (value, "")
        classes = " ".join(filter(None, ["text" if index < text_columns else "", css]))
        attr = f' class="{classes}"' if classes else ""
        return f"<{tag}{attr}>{escape(str(value))}</{tag}>"

    head = "".join(cell("th", h, i) for i, h in enumerate(headers))
    classes = list(row_classes) if row_classes is not None else []
    body = []
    for n, row in enumerate(rows):
        css = classes[n] if n < len(classes) and classes[n] else ""
        attr = f' class="{css}"' if css else ""
        body.append(f"<tr{attr}>" + "".join(cell("td", v, i) for i, v in enumerate(row))
                    + "</tr>")
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body) + \
        "\n</tbody>\n</table>"


def note(text: str) -> str:
    return f'<p class="note">{escape(text)}</p>'


def empty(text: str) -> str:
    """A line saying why a section has nothing to show."""
    return f'<p class="empty">{escape(text)}</p>'


def heading(text: str) -> str:
    return f"<h3>{escape(text)}</h3>"


def bullet_list(items: Iterable[str], css: str = "") -> str:
    attr = f' class="{css}"' if css else ""
    return f"<ul{attr}>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>"
