"""What every part of the report page writes its text through."""

from __future__ import annotations

import html

from trainwatch.cliutil import printable

# What a JSON text inside a <script> element must not hold as it is: "</script", "<!--" and
# "<script" change how the HTML parser reads the element's end, "&" an entity in older readers,
# U+2028/2029 end a line in older JavaScript. JSON's own escapes for them are the same string.
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                              "\u2028": "\\u2028", "\u2029": "\\u2029"})


def e(value: object) -> str:
    r"""``value`` as HTML text (None as nothing), a name's control characters written out as
    every text output writes them (:func:`~trainwatch.cliutil.printable`).

    >>> e("a<b\n\x1b[2J")
    'a&lt;b\\n\\x1b[2J'
    """
    return html.escape(printable("" if value is None else str(value)))


def script_json(text: str) -> str:
    r"""JSON ``text`` safe inside ``<script type="application/json">`` in every context: the
    same object to ``JSON.parse``, with no ``<``, ``>``, ``&``, U+2028 or U+2029 as they are.

    >>> import json
    >>> script_json(json.dumps({"trial": "</script><!--<script>\u2028"}, ensure_ascii=False))
    '{"trial": "\\u003c/script\\u003e\\u003c!--\\u003cscript\\u003e\\u2028"}'
    >>> json.loads(script_json('{"a": "<&>"}'))
    {'a': '<&>'}
    """
    return text.translate(_SCRIPT_SAFE)
