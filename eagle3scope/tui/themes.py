"""Themes are ``.tcss`` files; this module finds them, turns them into Textual themes and remembers
the user's choice.

A theme file is ordinary Textual CSS whose ``$name: value;`` declarations double as the theme's
colours: Textual's own (``$primary``, ``$background``, ...) go into a :class:`textual.theme.Theme`
so built-in widgets follow, the ``$e3s-*`` ones become theme variables our stylesheet and panels
use, ``$dark`` says whether it is a dark theme. Any rules in the file are applied on top.

Search order (first hit per name wins): ``$XDG_CONFIG_HOME/eagle3scope/themes`` (the user's own),
the ``themes/`` folder of a source checkout or editable install, then the copy a wheel installs
under ``<prefix>/share/eagle3scope/themes``.
"""

from __future__ import annotations

import json
import os
import re
import site
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from textual.theme import Theme

DEFAULT_THEME = "dark"
_DECL = re.compile(r"^\s*\$([A-Za-z0-9_-]+)\s*:\s*([^;]+?)\s*;", re.MULTILINE)
_THEME_FIELDS = {"primary", "secondary", "warning", "error", "success", "accent", "foreground", "background", "surface", "panel", "boost"}


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "eagle3scope"


def theme_dirs() -> list[Path]:
    dirs = [config_dir() / "themes", Path(__file__).resolve().parents[2] / "themes"]
    prefixes = [sysconfig.get_path("data"), sys.prefix, getattr(site, "USER_BASE", None)]
    dirs += [Path(p) / "share" / "eagle3scope" / "themes" for p in prefixes if p]
    return [d for i, d in enumerate(dirs) if d.is_dir() and d not in dirs[:i]]


@dataclass(frozen=True)
class ThemeFile:
    name: str
    path: Path
    css: str

    def to_textual(self) -> Theme:
        decls = dict(_DECL.findall(_strip_comments(self.css)))
        colours = {k: v for k, v in decls.items() if k in _THEME_FIELDS}
        if "primary" not in colours:
            raise ValueError(f"theme {self.path} declares no $primary colour")
        variables = {k: v for k, v in decls.items() if k not in _THEME_FIELDS and k != "dark"}
        dark = decls.get("dark", "true").lower() not in ("false", "0", "no")
        return Theme(name=f"e3s-{self.name}", dark=dark, variables=variables, **colours)


    @property
    def rules(self) -> str:
        """The file's rules without its declarations (those travel in the Theme); lines kept."""
        return _DECL.sub("", self.css)


def _strip_comments(css: str) -> str:
    return re.sub(r"/\*.*?\*/", "", css, flags=re.DOTALL)


def available_themes() -> dict[str, ThemeFile]:
    """Every theme found, by name (file stem), in search order."""
    found: dict[str, ThemeFile] = {}
    for directory in theme_dirs():
        for path in sorted(directory.glob("*.tcss")):
            if path.stem not in found:
                found[path.stem] = ThemeFile(path.stem, path, path.read_text(encoding="utf-8"))
    return found


def load_theme(name_or_path: str) -> ThemeFile:
    """A theme by name, or a ``.tcss`` file by path."""
    path = Path(name_or_path)
    if path.suffix == ".tcss" and path.is_file():
        return ThemeFile(path.stem, path, path.read_text(encoding="utf-8"))
    themes = available_themes()
    if name_or_path not in themes:
        raise KeyError(f"unknown theme {name_or_path!r}; available: {', '.join(sorted(themes)) or 'none'}")
    return themes[name_or_path]


def _settings_path() -> Path:
    return config_dir() / "tui.json"


def load_settings() -> dict:
    try:
        data = json.loads(_settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remembered_theme() -> str:
    theme = load_settings().get("theme")
    return theme if isinstance(theme, str) and theme else DEFAULT_THEME


def remember_theme(name: str) -> None:
    """Store the choice in ``tui.json`` atomically; an unwritable config dir is not an error."""
    settings = load_settings()
    settings["theme"] = name
    path = _settings_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
