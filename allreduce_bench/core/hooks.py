"""The named hooks through which features reach the core (pluggy, as pytest): the core calls a hook, never a
feature. `Hooks` travels to the ranks as its plugins' module names. No torch."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from allreduce_bench.core.environment import user_setting

PROJECT = "allreduce_bench"
PLUGINS_ENV = "ALLREDUCE_BENCH_PLUGINS"  # more plugin modules, comma-separated (as PYTEST_PLUGINS)
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@dataclass(frozen=True)
class Section:
    """A feature's part of report.md and plots/, from the rows alone: `draw(frame, out_dir, fmt, footnote) ->
    {name: path}`, `markdown(frame, out_dir, figures) -> lines` ([] where the rows do not concern it),
    `tables(frame, size_bytes) -> [(title, how to read it, table)]`, `own_figures(name)`: figures it embeds
    itself; `benchmarks`: the rows it reports, which make a report without AllReduce rows."""

    name: str
    markdown: Callable[..., list[str]] = lambda frame, out_dir, figures: []
    draw: Callable[..., dict[str, Path]] | None = None
    own_figures: Callable[[str], bool] = lambda name: False
    tables: Callable[..., list] | None = None
    benchmarks: tuple[str, ...] = ()


@dataclass(frozen=True)
class RowKind:
    """A feature's rows in results.csv: their `benchmark` value, the columns they cannot be read
    without, and whether its runs' meta.json has a block of that name (`run --resume` refuses it)."""

    benchmark: str
    needs: tuple[str, ...] = ()
    meta_block: bool = False


@dataclass(frozen=True)
class Runnable:
    """A benchmark `emulate` may start on every host: its name in --benchmarks, the command each
    host runs, `config(options, started, host)` (its command's options to its config, no torch),
    `watch(out_dir, since, config)` where it watches its hosts' launches itself (its result is the
    exit code), the options it gets unless given, and those it never gets."""

    name: str
    command: str
    config: Callable[..., Any]
    watch: Callable[[Path, float, Any], Any] | None = None
    defaults: tuple[tuple[str, str], ...] = ()
    without: tuple[str, ...] = ()


class Spec:
    """Every hook. A list-valued hook's answers are joined in the order the plugins were given."""

    @hookspec
    def report_sections(self) -> list[Section]:
        """report.md's and plots/' parts beyond the sweep's own."""
        return []

    @hookspec
    def row_kinds(self) -> list[RowKind]:
        """The feature's rows, as the readers of results must know them."""
        return []

    @hookspec
    def emulate_runnables(self) -> list[Runnable]:
        """What `emulate --benchmarks` may start."""
        return []

    @hookspec
    def summary_lines(self, frame: Any) -> list[str]:
        """Lines added to `run`'s terminal summary."""
        return []

    @hookspec
    def after_ranks(self, config: Any) -> None:
        """Run by the writer once every rank has ended, before the summary."""

    @hookspec(firstresult=True)
    def dump_verdict(self, folder: Path, world_size: int | None) -> str | None:
        """One line naming the rank that hung, from the Flight Recorder dumps in `folder`."""

    @hookspec(firstresult=True)
    def expect_line(self, config: Any) -> str | None:
        """What `run --expect` prints before the ranks start."""

    @hookspec
    def rank_starting(self, rank: int) -> None:
        """On every rank before it joins the world."""

    @hookspec
    def row_recorded(self, session: Any) -> None:
        """On every rank after each measurement's row, between two measurements."""

    @hookspec(firstresult=True)
    def before_sample(self, rank: int) -> Callable[[], None] | None:
        """What a rank runs before each sample's clock starts (after the alignment)."""


class Hooks:
    """The plugins of one run, by module, pickled as the modules' names (spawned ranks import them again)."""

    def __init__(self, plugins: Sequence[ModuleType] = ()):
        self.plugins = tuple(plugins)
        self._manager = pluggy.PluginManager(PROJECT)
        self._manager.add_hookspecs(Spec)
        for plugin in self.plugins:
            self._manager.register(plugin)

    @classmethod
    def named(cls, names: Sequence[str]) -> Hooks:
        return cls([importlib.import_module(name) for name in names])

    @classmethod
    def with_user_plugins(cls, plugins: Sequence[ModuleType]) -> Hooks:
        """`plugins` and those PLUGINS_ENV names (a site's or a test's own hooks)."""
        extra = [n.strip() for n in (user_setting(PLUGINS_ENV) or "").split(",") if n.strip()]
        return cls([*plugins, *(importlib.import_module(name) for name in extra)])

    def __reduce__(self):
        return Hooks.named, ([plugin.__name__ for plugin in self.plugins],)

    @property
    def call(self) -> Any:
        """The hooks by name: `hooks.call.dump_verdict(folder=..., world_size=...)`."""
        return self._manager.hook

    def joined(self, name: str, **kwargs: Any) -> list:
        """A list-valued hook's answers, joined in plugin order (pluggy calls the last first)."""
        return [item for answer in reversed(getattr(self._manager.hook, name)(**kwargs))
                for item in (answer or ())]

    @property
    def sections(self) -> tuple[Section, ...]:
        return tuple(self.joined("report_sections"))

    @property
    def row_kinds(self) -> tuple[RowKind, ...]:
        return tuple(self.joined("row_kinds"))


NONE = Hooks()  # the core alone: the sweep's own tables and figures
