"""mkdocs hooks (mkdocs.yml `hooks:`): the committed example results in the site, and the
command reference's defaults readable under click >= 8.3.

doc/*.md link the example results as `../results/example-*/...` so that the links work on
GitHub; the site gets those files under `results/` and the links are rewritten to match, so
`mkdocs build --strict` still fails on a link to a file that does not exist.
"""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = "results/example-*"
# Raw samples and Parquet copies of results.csv: nothing a page shows or links.
LEFT_OUT = {".parquet"}
UP_TO_RESULTS = re.compile(r"\]\(\.\./results/")


def on_files(files, config):
    for path in sorted(ROOT.glob(f"{EXAMPLES}/**/*")):
        relative = path.relative_to(ROOT)
        if path.is_file() and not LEFT_OUT & {part.suffix for part in [relative, *relative.parents]}:
            files.append(File(relative.as_posix(), str(ROOT), config["site_dir"],
                              config["use_directory_urls"], inclusion=InclusionLevel.NOT_IN_NAV))
    return files


def on_page_markdown(markdown, page, config, files):
    if "/" in page.file.src_uri:
        return markdown  # every doc page sits at the top of doc/; nothing below it links results
    return UP_TO_RESULTS.sub("](results/", markdown)


def on_page_content(html, page, config, files):
    # mkdocs-click 0.9 prints click 8.3's "no default" marker (mkdocs/mkdocs-click#95).
    return html.replace("<code>Sentinel.UNSET</code>", "none")
