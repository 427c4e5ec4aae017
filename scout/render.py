"""The report's two renderers: one table model (``scout.tables``), written as LaTeX and as HTML.

Tables hold plain text and ``Entry`` values (a number with its ± term and its best/second mark,
a p-value with its shading, a learning rate, a styled label). Each renderer turns them into its
own markup (``tex``, ``html``) inside its own templates (``templates/*.tex.j2``, ``*.html.j2``), so
bold, underline, ± and shading mean the same in the PDF and in the page.
"""

from __future__ import annotations

import html as _html
import math
from dataclasses import dataclass
from pathlib import Path

import jinja2
from markupsafe import Markup

TEMPLATES = Path(__file__).parent / "templates"
HIGHLIGHT = "hl"  # LaTeX colour of a significant p-value cell (defined in the document)


@dataclass(frozen=True)
class Entry:
    """One cell: ``kind`` num (``mean`` ± ``pm`` at ``decimals``, ``style`` best/second), p (``value``,
    ``shade`` when significant), lr (``value``), or text (``text``, ``bold``, a small ``note``)."""

    kind: str = "text"
    mean: float | None = None
    pm: float | None = None
    decimals: int = 1
    style: str = ""
    value: float | None = None
    shade: bool = False
    text: str = ""
    bold: bool = False
    note: str = ""


def ok(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def num(mean, pm=None, decimals: int = 1, style: str = "") -> Entry:
    return Entry("num", mean=mean if ok(mean) else None, pm=pm if ok(pm) else None, decimals=decimals, style=style)


def p_entry(p: float, shade: bool = False) -> Entry:
    return Entry("p", value=p if ok(p) else None, shade=shade)


def lr_entry(lr: float | str, note: str = "") -> Entry:
    """A learning rate; a small note beside it (``tuned``: the tuning stage chose it). A value still
    being searched (the string ``tuned``) prints as text."""
    if isinstance(lr, str):
        return label(lr, note=note)
    return Entry("lr", value=lr, note=note)


def label(text: str, bold: bool = False, note: str = "") -> Entry:
    return Entry("text", text=str(text), bold=bold, note=note)


def p_digits(p: float) -> str:
    """Three significant digits as the paper prints them (0.0391, 0.500); tiny values as <0.001."""
    return "<0.001" if p < 0.001 else f"{p:#.3g}"


def lr_parts(lr: float) -> tuple[str, int]:
    exp = math.floor(math.log10(lr))
    return f"{lr / 10**exp:.2f}".rstrip("0").rstrip("."), exp


# ------------------------------------------------------------------------------------------------
# LaTeX
# ------------------------------------------------------------------------------------------------

_TEX_SYMBOLS = {"±": r"$\pm$", "→": r"$\rightarrow$", "≤": r"$\le$", "≥": r"$\ge$", "β": r"$\beta$", "×": r"$\times$"}


def tex(x) -> str:
    """A cell or a piece of text in LaTeX: specials escaped, the model's few symbols as math."""
    if isinstance(x, Entry):
        return _tex_entry(x)
    out = str(x)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#")):
        out = out.replace(a, b)
    out = out.replace("_", r"\_").replace("{", r"\{").replace("}", r"\}").replace("->", r"$\rightarrow$")
    for a, b in _TEX_SYMBOLS.items():
        out = out.replace(a, b)
    return out


def _tex_entry(e: Entry) -> str:
    if e.kind == "num":
        if e.mean is None:
            return "--"
        macro = {"best": "best", "second": "second"}.get(e.style, "")
        if e.pm is not None:
            return rf"\{macro}res{{{e.mean:.{e.decimals}f}}}{{{e.pm:.{e.decimals}f}}}"
        return rf"\{macro}val{{{e.mean:.{e.decimals}f}}}"
    if e.kind == "p":
        if e.value is None:
            return "--"
        text = "$<0.001$" if e.value < 0.001 else f"${p_digits(e.value)}$".replace("e", r"\mathrm{e}")
        return (rf"\cellcolor{{{HIGHLIGHT}}}" if e.shade else "") + text
    if e.kind == "lr":
        mant, exp = lr_parts(e.value)
        return rf"${mant}{{\times}}10^{{{exp}}}$" + (rf" {{\scriptsize {tex(e.note)}}}" if e.note else "")
    body = tex(e.text)
    body = rf"\textbf{{{body}}}" if e.bold else body
    return body + (rf" {{\scriptsize {tex(e.note)}}}" if e.note else "")


def tex_environment() -> jinja2.Environment:
    """Jinja with LaTeX-safe delimiters: ((* block *)), ((( variable ))), ((# comment #))."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        block_start_string="((*",
        block_end_string="*))",
        variable_start_string="(((",
        variable_end_string=")))",
        comment_start_string="((#",
        comment_end_string="#))",
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    env.filters["tex"] = tex
    return env


# ------------------------------------------------------------------------------------------------
# HTML
# ------------------------------------------------------------------------------------------------


def html(x) -> Markup:
    """A cell or a piece of text in HTML (escaped; bold for best, underline for second)."""
    if not isinstance(x, Entry):
        return Markup(_html.escape(str(x)))
    e = x
    if e.kind == "num":
        if e.mean is None:
            return Markup('<span class="na">--</span>')
        body = f"{e.mean:.{e.decimals}f}"
        if e.pm is not None:
            body += f'<span class="pm">±{e.pm:.{e.decimals}f}</span>'
        cls = {"best": "best", "second": "second"}.get(e.style)
        return Markup(f'<span class="{cls}">{body}</span>' if cls else body)
    if e.kind == "p":
        if e.value is None:
            return Markup('<span class="na">--</span>')
        cls = ' class="sig"' if e.shade else ""
        return Markup(f"<span{cls}>{_html.escape(p_digits(e.value))}</span>")
    if e.kind == "lr":
        mant, exp = lr_parts(e.value)
        note = f' <small class="note">{_html.escape(e.note)}</small>' if e.note else ""
        return Markup(f"{mant}×10<sup>{exp}</sup>{note}")
    body = _html.escape(e.text)
    body = f"<strong>{body}</strong>" if e.bold else body
    return Markup(body + (f' <small class="note">{_html.escape(e.note)}</small>' if e.note else ""))


def html_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        autoescape=True,
    )
    env.filters["html"] = html
    return env


def render(table: dict, fmt: str = "tex", env: jinja2.Environment | None = None) -> str:
    """A table of ``scout.tables`` in ``fmt`` (tex or html), with its template for that format."""
    env = env or (tex_environment() if fmt == "tex" else html_environment())
    return env.get_template(f"{table['template']}.{fmt}.j2").render(t=table)
