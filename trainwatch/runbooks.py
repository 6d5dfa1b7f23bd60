"""docs/runbooks.md as one HTML page, so the local stack's runbook links open in a browser.

The stack's webhook process serves it at ``/runbooks`` and the stack's rules link there
(`trainwatch stack up --runbook-url` points them elsewhere). Each heading gets the anchor
GitHub gives it (``## TrainwatchDataloaderBound`` -> ``#trainwatchdataloaderbound``), which is
what the rules' ``runbook_url`` ends with. Only what the runbook uses is rendered: headings,
paragraphs, lists, fenced code, tables (as preformatted text), inline code and links.

Example:
    >>> page = render("# Runbooks\\n\\n## TrainwatchGPUThrottled\\n\\nSee `nvidia-smi`.\\n")
    >>> '<h2 id="trainwatchgputhrottled">TrainwatchGPUThrottled</h2>' in page
    True
    >>> "<code>nvidia-smi</code>" in page
    True
"""

from __future__ import annotations

import html
import re

_HEADING = re.compile(r"^(#{1,6}) (.*)$")
_INLINE = re.compile(r"`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*")


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _inline(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        code, label, href, strong = m.groups()
        if code is not None:
            return f"<code>{html.escape(code)}</code>"
        if label is not None:
            return f'<a href="{html.escape(href)}">{_inline(label)}</a>'
        return f"<strong>{html.escape(strong)}</strong>"

    out, at = [], 0
    for m in _INLINE.finditer(text):
        out += [html.escape(text[at:m.start()]), one(m)]
        at = m.end()
    return "".join([*out, html.escape(text[at:])])


def render(markdown: str, title: str = "trainwatch runbooks") -> str:
    body: list[str] = []
    block: list[str] = []  # the lines of the paragraph or list being read
    fenced: list[str] | None = None

    def flush() -> None:
        if block and block[0].startswith("|"):
            body.append(f"<pre>{html.escape(chr(10).join(block))}</pre>")
        elif block:
            text, items = _split(block)
            if text:
                body.append(f"<p>{_inline(' '.join(text))}</p>")
            if items:
                body.append("<ul>\n" + "\n".join(f"<li>{_inline(item)}</li>" for item in items)
                            + "\n</ul>")
        block.clear()

    for line in markdown.splitlines():
        if fenced is not None:
            if line.startswith("```"):
                body.append(f"<pre><code>{html.escape(chr(10).join(fenced))}</code></pre>")
                fenced = None
            else:
                fenced.append(line)
            continue
        heading = _HEADING.match(line)
        if line.startswith("```") or heading or not line.strip():
            flush()
        if line.startswith("```"):
            fenced = []
        elif heading:
            level, text = len(heading[1]), heading[2].strip()
            body.append(f'<h{level} id="{anchor(text)}">{_inline(text)}</h{level}>')
        elif line.strip():
            block.append(line.strip() if not line.startswith("|") else line)
    flush()
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}"
            "pre{background:#f4f4f4;padding:.5em;overflow-x:auto}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _split(block: list[str]) -> tuple[list[str], list[str]]:
    """A block's leading text lines, and its list items (``- `` or ``* ``), each item's
    continuation lines joined to it."""
    text: list[str] = []
    items: list[str] = []
    for line in block:
        if line.startswith(("- ", "* ")):
            items.append(line[2:])
        elif items:
            items[-1] += " " + line
        else:
            text.append(line)
    return text, items
