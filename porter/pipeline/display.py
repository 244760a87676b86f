"""The live view of a run (rich): one line per stage, a bar for its units."""

from __future__ import annotations

from rich.markup import escape as _lit  # stage titles and summaries quote descriptor text: data

_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow", "not-run": "cyan"}


class RichDisplay:
    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.tasks = {}

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def stage_started(self, stage, total: int) -> None:
        if stage.id not in self.tasks:
            self.tasks[stage.id] = self.progress.add_task(f"[bold]{_lit(stage.id)}[/] {_lit(stage.title)}", total=max(total, 1))

    def unit_done(self, stage, name: str, cached: bool) -> None:
        if stage.id in self.tasks:
            self.progress.advance(self.tasks[stage.id])

    def stage_done(self, result) -> None:
        if result.id in self.tasks:
            self.progress.remove_task(self.tasks.pop(result.id))
        style = _STYLE.get(result.status, "")
        cached = f", {result.units_cached} cached" if getattr(result, "units_cached", 0) else ""
        self.console.print(f"[{style}]{result.status:8s}[/] [bold]{_lit(result.id)}[/] "
                           f"({result.seconds:.1f}s{cached}) {_lit(result.summary)}", highlight=False, soft_wrap=True)
