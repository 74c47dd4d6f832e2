"""Every text colour of the stylesheet against its backgrounds, in both themes: WCAG AA
asks 4.5:1 for normal text (https://www.w3.org/TR/WCAG22/#contrast-minimum)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from web.templatetags.tarsy import status_class

CSS = (Path(__file__).resolve().parents[2] / "static" / "tarsy" / "tarsy.css").read_text()
AA = 4.5

LIGHT_RE = re.compile(r"^:root \{(.*?)\}", re.M | re.S)
DARK_RE = re.compile(r'^\[data-theme="dark"\] \{(.*?)\}', re.M | re.S)
SYSTEM_DARK_RE = re.compile(
    r'@media \(prefers-color-scheme: dark\) \{\s*:root:not\(\[data-theme="light"\]\) \{(.*?)\}',
    re.S,
)
PROPERTY_RE = re.compile(r"--([\w-]+)\s*:\s*([^;]+);")
BADGE_RE = re.compile(
    r"\.badge(?:\.(?P<cls>[\w-]+))? \{[^}]*?background:var\(--(?P<bg>[\w-]+)\);"
    r" color:var\(--(?P<fg>[\w-]+)\);"
)

# (text, background) as the stylesheet pairs them.
TEXT_PAIRS = [
    ("fg", "bg"),
    ("fg", "card-bg"),
    ("fg", "code-bg"),
    ("fg", "input-bg"),
    ("fg", "stage-bg"),
    ("fg", "final-bg"),
    ("muted", "bg"),
    ("muted", "card-bg"),
    ("muted", "stage-bg"),
    ("link", "bg"),
    ("link", "card-bg"),
    ("ok", "card-bg"),
    ("bad", "bg"),
    ("bad", "card-bg"),
    ("bad", "code-bg"),  # pre.error-text
    ("warn", "card-bg"),
    ("thinking-fg", "card-bg"),
    ("accent-fg", "accent"),  # buttons
    ("accent-fg", "danger-bg"),
    ("accent-fg", "button-muted-bg"),
    ("topbar-fg", "topbar-bg"),
    ("topbar-muted", "topbar-bg"),
    ("banner-fg", "banner-bg"),  # the demo banner and the system page's warnings
    ("badge-fg", "badge-bg"),
    ("badge-ok-fg", "badge-ok-bg"),
    ("badge-bad-fg", "badge-bad-bg"),
    ("badge-running-fg", "badge-running-bg"),
    ("badge-queued-fg", "badge-queued-bg"),
    ("badge-muted-fg", "badge-muted-bg"),
]


def properties(block: str) -> dict[str, str]:
    return {name: value.strip() for name, value in PROPERTY_RE.findall(block)}


def block(pattern: re.Pattern[str]) -> dict[str, str]:
    match = pattern.search(CSS)
    assert match, f"tarsy.css has no block matching {pattern.pattern!r}"
    return properties(match.group(1))


LIGHT = block(LIGHT_RE)
THEMES = {"light": LIGHT, "dark": {**LIGHT, **block(DARK_RE)}}


def colour(theme: dict[str, str], name: str) -> str:
    value = theme[name]
    while (ref := re.fullmatch(r"var\(--([\w-]+)\)", value)) is not None:
        value = theme[ref.group(1)]
    assert re.fullmatch(r"#[0-9a-fA-F]{6}", value), f"--{name}: {value!r} is not #rrggbb"
    return value


def luminance(hex_colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: str, b: str) -> float:
    lighter, darker = sorted((luminance(a), luminance(b)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_the_ratio_is_computed_as_wcag_does():
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)
    # The "In progress" badge before the dark theme: too faint.
    assert contrast("#b7791f", "#fff3dc") < AA


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize(("text", "background"), TEXT_PAIRS)
def test_text_has_enough_contrast(theme, text, background):
    colours = THEMES[theme]
    ratio = contrast(colour(colours, text), colour(colours, background))
    assert ratio >= AA, f"{theme}: --{text} on --{background} is {ratio:.2f}:1"


def test_every_status_badge_uses_a_checked_pair():
    rules = {m["cls"] or "": (m["fg"], m["bg"]) for m in BADGE_RE.finditer(CSS)}
    statuses = ["pending", "in_progress", "cancelling", "completed", "failed", "cancelled"]
    classes = {status_class(status) for status in statuses} | {""}
    for cls in classes:
        assert cls in rules, f".badge.{cls} sets no background and colour from variables"
        assert rules[cls] in TEXT_PAIRS, f".badge.{cls} uses {rules[cls]}, which is not checked"


def test_the_system_preference_gets_the_same_dark_theme_as_the_toggle():
    assert block(SYSTEM_DARK_RE) == block(DARK_RE)


BASE_NAMES = ["bg", "fg", "muted", "card-bg", "border", "link", "accent", "ok", "bad", "warn"]
OLD_NAMES = ["line", "card", "run"]  # what page styles used before the themes


@pytest.mark.parametrize("name", [*BASE_NAMES, "code-bg", *OLD_NAMES])
def test_the_names_page_styles_build_on_are_defined_in_both_themes(name):
    for theme in THEMES.values():
        colour(theme, name)
