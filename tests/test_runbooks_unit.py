"""trainwatch.runbooks: the Markdown the runbook uses, rendered to the exact HTML page the stack's
webhook serves (headings with GitHub's anchors, paragraphs, lists, tables, fenced code, inline
code, links and bold), everything the text holds escaped."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from trainwatch.runbooks import _inline, _split, anchor, render

HEAD = ('<!doctype html>\n<html><head><meta charset="utf-8"><title>{}</title><style>'
        "body{{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}}"
        "pre{{background:#f4f4f4;padding:.5em;overflow-x:auto}}</style></head><body>\n")
TAIL = "\n</body></html>\n"

MARKDOWN = """# Run books & more

Intro line one
  continued with `a<b` and [the **docs**](http://x/y?a=1&b=2).
- item one
  more of one
* item two **bold <x>**

| a | b |  
|---|---|

```sh
echo "<hi>"

  indented
```
####### not a heading
###### Six (deep)!
text after"""

BODY = """<h1 id="run-books--more">Run books &amp; more</h1>
<p>Intro line one continued with <code>a&lt;b</code> and <a href="http://x/y?a=1&amp;b=2">the \
<strong>docs</strong></a>.</p>
<ul>
<li>item one more of one</li>
<li>item two <strong>bold &lt;x&gt;</strong></li>
</ul>
<pre>| a | b |  
|---|---|</pre>
<pre><code>echo &quot;&lt;hi&gt;&quot;

  indented</code></pre>
<p>####### not a heading</p>
<h6 id="six-deep">Six (deep)!</h6>
<p>text after</p>"""


def test_the_page_is_every_block_rendered_in_order() -> None:
    assert render(MARKDOWN, title="T <1>") == HEAD.format("T &lt;1&gt;") + BODY + TAIL


def test_an_empty_runbook_is_the_page_alone_under_the_default_title() -> None:
    assert render("") == HEAD.format("trainwatch runbooks") + TAIL
    assert render("\n\n  \n") == render("")


def test_a_list_alone_has_no_paragraph_a_table_keeps_lines_after_it_an_open_fence_is_dropped(
        ) -> None:
    page = render("##  Spaced `x`  \n- only\n- items\n\n  | t |  \n| u |\nplain\n\n```\nopen")
    assert page == HEAD.format("trainwatch runbooks") + (
        '<h2 id="spaced-x">Spaced <code>x</code></h2>\n<ul>\n<li>only</li>\n<li>items</li>\n'
        "</ul>\n<pre>| t |\n| u |\nplain</pre>") + TAIL


def test_a_paragraph_alone_has_no_list_and_a_fence_ends_it() -> None:
    assert render("one\ntwo\n```\nx\n```\nthree") == HEAD.format("trainwatch runbooks") + (
        "<p>one two</p>\n<pre><code>x</code></pre>\n<p>three</p>") + TAIL


def test_a_heading_needs_its_space_and_ends_the_block_before_it() -> None:
    assert render("#NoSpace\n## Yes\ntext") == HEAD.format("trainwatch runbooks") + (
        '<p>#NoSpace</p>\n<h2 id="yes">Yes</h2>\n<p>text</p>') + TAIL


def test_anchor_is_githubs() -> None:
    assert anchor("TrainwatchDataloaderBound") == "trainwatchdataloaderbound"
    assert anchor("What to do: 1-2 (fast)!") == "what-to-do-1-2-fast"
    assert anchor("a  b_c") == "a--b_c"


def test_inline_marks_each_kind_and_escapes_between() -> None:
    assert _inline("") == ""
    assert _inline("<a> `x&y` [l `c`](u\"v) **b&** tail>") == (
        "&lt;a&gt; <code>x&amp;y</code> <a href=\"u&quot;v\">l <code>c</code></a> "
        "<strong>b&amp;</strong> tail&gt;")
    assert _inline("`unclosed and [no](link with space)") == \
        "`unclosed and [no](link with space)"


def test_split_is_the_leading_text_and_the_items_with_their_continuations() -> None:
    assert _split(["t1", "t2", "- a", "a2", "* b", "- c"]) == (["t1", "t2"],
                                                               ["a a2", "b", "c"])
    assert _split(["- a", "* b", "b2", "b3"]) == ([], ["a", "b b2 b3"])  # the last item's
    assert _split(["-x", "*y"]) == (["-x", "*y"], [])
    assert _split([]) == ([], [])


TAG = re.compile(r'</?(h[1-6]( id="[^"<>]*")?|p|ul|li|pre|code|strong|a( href="[^"<>]*")?)>')


@given(st.text(alphabet="ab <>&\"'`*[]()#|-\n", max_size=80))
def test_no_markup_of_the_text_survives_unescaped(text: str) -> None:
    page = render(text)
    head = HEAD.format("trainwatch runbooks")
    assert page.startswith(head) and page.endswith(TAIL)
    body = TAG.sub("", page[len(head):-len(TAIL)])
    assert "<" not in body and ">" not in body and '"' not in body
    assert body.count("&lt;") <= text.count("<")
