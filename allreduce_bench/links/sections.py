"""What links lends the core's report (core/extensions.py): the intra/inter table among the
report's tables and plots/links.png, wherever rows carry intra and inter links."""
from __future__ import annotations

from allreduce_bench.core.extensions import Rows, Section
from allreduce_bench.links.summary import draw_links, links_table

ROWS = Rows("links")
SECTION = Section("links", draw=draw_links, tables=links_table)
