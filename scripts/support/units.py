"""systemd unit files read as systemd reads them."""

from __future__ import annotations


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every assignment in order (DeviceAllow= and friends repeat).

    The subset of systemd.syntax(7) the unit uses: comments, sections, ``Key=value``,
    backslash continuation lines.
    """
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"assignment outside a section: {line!r}"
        key, sep, value = line.partition("=")
        assert sep, f"not an assignment: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections
