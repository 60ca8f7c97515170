"""Tables rendered two ways: GitHub Markdown and LaTeX with booktabs (shaped like the paper's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from arc_eval.errors import InvalidInput

_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "×": r"$\times$",
    "χ²": r"$\chi^2$",
    "—": "--",
    "·": r"$\cdot$",
    "<": r"$<$",
    ">": r"$>$",
    "|": r"$|$",
}


def tex_escape(text: str) -> str:
    """Escape LaTeX special characters (and map ±, ×, χ², —, ·, <, >, | to forms that print in any font encoding)."""
    out = []
    i = 0
    while i < len(text):
        if text.startswith("χ²", i):
            out.append(_TEX_ESCAPES["χ²"])
            i += 2
            continue
        ch = text[i]
        out.append(_TEX_ESCAPES.get(ch, ch))
        i += 1
    return "".join(out)


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True, slots=True)
class Cell:
    """One table cell: its Markdown text and its LaTeX source."""

    md: str
    tex: str


def cell(text: str, tex: str | None = None, bold: bool = False) -> Cell:
    """A cell from plain text (escaped for LaTeX unless `tex` is given)."""
    source = tex if tex is not None else tex_escape(text)
    if bold:
        return Cell(f"**{text}**" if text else text, f"\\textbf{{{source}}}" if source else source)
    return Cell(text, source)


@dataclass
class Section:
    """A block of rows under an optional group header (the paper's shaded model rows)."""

    header: str | None
    rows: list[list[Cell]] = field(default_factory=list)


@dataclass
class Table:
    title: str
    columns: list[str]
    align: str  # one of l/c/r per column
    sections: list[Section] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    label: str = ""

    def add_section(self, header: str | None) -> Section:
        section = Section(header)
        self.sections.append(section)
        return section


def render_markdown(table: Table) -> str:
    n = len(table.columns)
    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(md_escape(c) for c in table.columns) + " |")
    lines.append("|" + "|".join(":--" if a == "l" else "--:" if a == "r" else ":-:" for a in table.align) + "|")
    for section in table.sections:
        if section.header:
            lines.append("| " + " | ".join([f"**{md_escape(section.header)}**"] + [""] * (n - 1)) + " |")
        for row in section.rows:
            if len(row) != n:
                raise InvalidInput(f"row of {len(row)} cells in a table of {n} columns ({table.title})")
            lines.append("| " + " | ".join(md_escape(c.md) for c in row) + " |")
    if table.notes:
        lines.append("")
        lines.extend(f"- {note}" for note in table.notes)
    return "\n".join(lines) + "\n"


def render_latex(table: Table) -> str:
    n = len(table.columns)
    lines = [
        "\\begin{table*}[htbp]",
        "\\centering",
        "\\small",
        f"\\begin{{tabular}}{{{table.align}}}",
        "\\toprule",
        " & ".join(f"\\textbf{{{tex_escape(c)}}}" for c in table.columns) + " \\\\",
        "\\midrule",
    ]
    for i, section in enumerate(table.sections):
        if i:
            lines.append("\\midrule")
        if section.header:
            lines.append(f"\\multicolumn{{{n}}}{{l}}{{\\textbf{{{tex_escape(section.header)}}}}} \\\\")
        for row in section.rows:
            lines.append(" & ".join(c.tex for c in row) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    caption = tex_escape(table.title)
    if table.notes:
        caption += " " + " ".join(tex_escape(note) for note in table.notes)
    lines.append(f"\\caption{{{caption}}}")
    if table.label:
        lines.append(f"\\label{{{table.label}}}")
    lines.append("\\end{table*}")
    return "\n".join(lines) + "\n"
