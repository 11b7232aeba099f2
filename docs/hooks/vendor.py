"""Serve KaTeX from the site itself: fetched from npm once into `docs/assets/vendor/katex/`.

The site must work offline and make no request to another host, so the math library is copied into
the site instead of loaded from a CDN. `npm pack` downloads the exact version below from the npm
registry (no `node_modules`, nothing installed); without npm the same tarball is read from the
registry over HTTPS. Either way its sha512 must be the registry's `dist.integrity`. Only the files
the pages load are kept: the script, the auto-render extension, the stylesheet and the WOFF2 fonts
(about 0.6 MB in all).

Why a hook: Material's `privacy` plugin, the maintained way to self-host assets, downloads them at
build time from the CDN the page names (jsdelivr), and CI reaches only package registries (PyPI,
npm); the npm registry is where KaTeX is published. The PyPI packages that carry KaTeX either ship
it inside a JupyterLab extension bundle (jupyterlab-katex) or render math on the server with a Node
binary (markdown-katex, mkdocs-katex-ssr), which the pages' client-side rendering does not need.

After the build, the theme's source maps (`*.js.map`, 1.2 MB of the site, read only by a browser's
developer tools) are removed, with the comment in each script that points to one: the site has a
weight budget (`tests/test_site_interactive.py`), and Material has no option to leave them out.
For the same reason the theme's lunr language scripts (`assets/javascripts/lunr/`, 0.9 MB: stemmers
for 30 languages, Thai and Japanese word splitters) are not copied while the search indexes English
only (`lang: [en]`, the default): its worker then loads none of them (Chinese pages are cut into
words at build time, by the search plugin with jieba).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from pathlib import Path

KATEX = "katex@0.16.47"
TARBALL = "https://registry.npmjs.org/katex/-/katex-0.16.47.tgz"
INTEGRITY = ("sha512-Eeo8Ys1doU1z+x8AZsPpQu+p/QcZBI5PeOo7QGQdy2x2m0MU/hYagBbGOmXwr5KVbEfVuWv9LpnQ"
             "Weehogurjg==")
log = logging.getLogger("mkdocs.hooks.vendor")


def on_config(config):
    target = Path(config["docs_dir"]) / "assets" / "vendor" / "katex"
    stamp = target / ".version"
    if stamp.is_file() and stamp.read_text().strip() == KATEX:
        return config
    log.info("Fetching %s from the npm registry into %s", KATEX, target)
    with tempfile.TemporaryDirectory() as tmp:
        tarball = _download(Path(tmp))
        sha512 = hashlib.sha512(tarball.read_bytes()).digest()
        digest = "sha512-" + base64.b64encode(sha512).decode()
        if digest != INTEGRITY:
            raise SystemExit(f"{tarball.name}: sha512 {digest} is not the registry's {INTEGRITY}")
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        dist = Path(tmp) / "package" / "dist"
        if target.exists():
            shutil.rmtree(target)
        (target / "contrib").mkdir(parents=True)
        (target / "fonts").mkdir()
        for name in ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js"):
            shutil.copy2(dist / name, target / name)
        for font in (dist / "fonts").glob("*.woff2"):
            shutil.copy2(font, target / "fonts" / font.name)
        _keep_woff2_only(target / "katex.min.css")
    stamp.write_text(KATEX + "\n")
    return config


def _download(folder: Path) -> Path:
    npm = shutil.which("npm")
    if npm:
        subprocess.run([npm, "pack", KATEX, "--silent"], cwd=folder, check=True,
                       stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300)
        (tarball,) = folder.glob("katex-*.tgz")
        return tarball
    tarball = folder / TARBALL.rsplit("/", 1)[1]
    with urllib.request.urlopen(TARBALL, timeout=120) as response:
        tarball.write_bytes(response.read())
    return tarball


def _keep_woff2_only(css_path: Path) -> None:
    """Drop the .woff/.ttf fallbacks from @font-face (every browser the site targets has WOFF2)."""
    css = css_path.read_text(encoding="utf-8")
    css = re.sub(r',url\(fonts/[^)]+\.(?:woff|ttf)\) format\("(?:woff|truetype)"\)', "", css)
    css_path.write_text(css, encoding="utf-8")


def on_files(files, config):
    search = next((p for name, p in config.plugins.items() if name.split("/")[-1] == "search"), None)
    if search is None or set(search.config.lang or ["en"]) != {"en"}:
        return files
    unused = [f for f in files if f.src_uri.startswith("assets/javascripts/lunr/")]
    for file in unused:
        files.remove(file)
    log.info("lunr language scripts left out (search in English only): %d files, %.0f KiB", len(unused),
             sum(Path(f.abs_src_path).stat().st_size for f in unused) / 1024)
    return files


_MAP_COMMENT = re.compile(r"\n?//# sourceMappingURL=\S+\.map\s*$")


def on_post_build(config):
    site = Path(config["site_dir"])
    maps = list(site.rglob("*.map"))
    size = sum(path.stat().st_size for path in maps)
    for path in maps:
        path.unlink()
    for script in site.rglob("*.js"):
        text = script.read_text(encoding="utf-8")
        if "sourceMappingURL=" in text:
            script.write_text(_MAP_COMMENT.sub("\n", text), encoding="utf-8")
    log.info("source maps left out: %d files, %.0f KiB", len(maps), size / 1024)
